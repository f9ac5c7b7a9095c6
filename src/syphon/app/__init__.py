"""The entry points' library: the ``syphon`` command, the notebook helpers, the Spark
session factory and the run report's page."""
