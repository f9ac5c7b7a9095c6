"""What the tests share: the paired namespaces and job configs they run against, the
storage emulator, the crash scenario, SDK and wire helpers, sample rows and cases.

Imported as ``from support.<module> import ...`` (``tests/`` is on pytest's path). Three
of them are also scripts ``./dev.sh`` runs: ``python tests/support/jvm.py`` (the tests'
JVM class archive), ``python tests/support/sdk_samples.py`` (the SDK's samples) and
``python tests/support/notebook_sync.py`` (the notebook from its source).
"""
