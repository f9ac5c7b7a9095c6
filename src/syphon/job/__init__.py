"""The stages of a run, each a function over DataFrames or a write: snapshot,
reconcile, plan, replay, settle, and ``run``, their sequence."""
