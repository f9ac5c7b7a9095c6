"""syphon: bring Azure Service Bus messages home from paired-namespace backlog queues.

The package is a library first: the console script (`syphon`), the spark-submit entry
in `jobs/` and the notebooks only parse their inputs and call into it.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
