"""The run: ``syphon run`` and ``syphon replay``'s wave loop (:mod:`.loop`), the wave
runner that replays and settles each wave under the run's lease (:mod:`.runner`), the
stages after a plan (:mod:`.stages`), what the waves add up to (:mod:`.finish`,
:mod:`.tally`), the report's figures (:mod:`.report`) and ``syphon status``
(:mod:`.status`).

The top wing: it imports every wing below it, and only :mod:`syphon.app` imports it.
"""
