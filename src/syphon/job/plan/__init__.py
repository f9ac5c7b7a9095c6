"""The plan: ``syphon plan`` and each wave's plan (:mod:`.planning`): the reconcile of a
snapshot (:mod:`.reconcile`), one verdict per message (:mod:`.classify`, with
:mod:`.too_soon`), the batches (:mod:`.batches`), the audit rows the driver keeps
(:mod:`.facts`), a wave ready to send (:mod:`.planned`) and the keys held back because a
message could not be read (:mod:`.unseen`).

Imports the shared vocabulary and the wings below it: replay, settle, read.
"""
