"""The demo and the outage scenario: test and demo code beside the local Service Bus.

Not part of the product wheel (which holds ``syphon`` only); it runs from a clone of the
repository: ``./dev.sh demo`` or ``python -m syphon_demo``.
"""
