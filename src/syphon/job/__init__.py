"""A run's stages, in wings: each sub-package owns one stage of the pipeline and
imports only the wings below it, and the modules at this level are the vocabulary
every wing shares.

From the bottom up (``tests/unit/test_architecture.py`` holds the order):

- the shared vocabulary, here: what a run is handed (:mod:`.context`), asked
  (:mod:`.request`) and where its I/O runs (:mod:`.where`); the source it drains
  (:mod:`.sources`) and how a parked message is restored (:mod:`.restore`,
  :mod:`.repair`, :mod:`.selection`); Spark's values as Python ones (:mod:`.rows`); the
  run's ledger rows (:mod:`.ledger`) and its exit codes (:mod:`.failures`). None of
  them imports a wing;
- :mod:`.replay`: sending a wave's messages to their primaries, batch by batch, with
  the journal that makes a crash leave only the in-flight batches in doubt;
- :mod:`.settle`: removing from the backlog what a run has finished with, and only that;
- :mod:`.read`: reading the source, peeked by Spark's tasks or received once under lock,
  in one wave or in several;
- :mod:`.plan`: ``syphon plan`` and each wave's plan: the reconcile, the classify's
  verdicts, the batches, the audit rows;
- :mod:`.run`: ``syphon run``'s wave loop, the stages after a plan, the final status,
  the report's figures and ``syphon status``.
"""
