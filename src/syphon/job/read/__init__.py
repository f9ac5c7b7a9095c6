"""The read: how a run reads its source, chosen once (:mod:`.modes`: peeked by Spark's
tasks, or received once under lock, :mod:`.once`, with its gap check, :mod:`.gaps`), the
snapshot of a source's queues (:mod:`.snapshot`, :mod:`.handoff`), and the waves a source
is drained in (:mod:`.waves`, :mod:`.wave_sizes`).

Imports the shared vocabulary, :mod:`syphon.job.replay` and :mod:`syphon.job.settle`
(a read once settles what it keeps locked).
"""
