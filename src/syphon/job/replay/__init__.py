"""The replay: a planned wave's messages sent to their primaries in partition-aware
batches (:mod:`.send`), each batch's rules (:mod:`.lanes`: what is sent, what is
skipped, and why) and the journal of transfers (:mod:`.journal`).

Imports the shared vocabulary of :mod:`syphon.job` only; no other wing.
"""
