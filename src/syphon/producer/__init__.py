"""The producer half: the paired-namespace sender (seed 004)."""
