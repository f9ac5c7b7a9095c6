"""The settle: what a run does with each planned message in its source (:mod:`.actions`:
complete, dead-letter, discard or leave, and why), the settlements of one queue by lock
tokens (:mod:`.by_locks`), the passes over a queue that receive what a peeked read left
(:mod:`.passes`), and the journal a wave's settle writes ahead of its first settlement
(:mod:`.journal`).

Imports the shared vocabulary and :mod:`syphon.job.replay` (its journal's records).
"""
