"""What an operator sees: logging, progress on a terminal, fail points for crash tests."""
