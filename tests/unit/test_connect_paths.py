"""A Spark Connect session serves the DataFrame API only: ``sparkContext``, ``_jvm``,
``_jsc``, ``_gateway`` and RDDs raise. Every place in the product that reaches for them is
listed here with why a Connect session never gets there (a check of the session's kind
first, or a local session only); a new one fails this test until it is guarded and
listed."""

from __future__ import annotations

import ast
from pathlib import Path

#: What a Connect session does not serve.
CLASSIC_ONLY = {"sparkContext", "_jvm", "_jsc", "_gateway", "rdd", "_jdf", "_sc"}

#: (module, function) -> why a Connect session never reaches it.
GUARDED = {
    ("syphon.core.sessions", "default_parallelism"): "after is_connect(spark) is false",
    ("syphon.app.on_demand", "release_memory"): "returns first on a Connect session",
    ("syphon.obs.progress", "watch"): "only when not is_connect(spark)",
    ("syphon.app.spark", "build_spark_session"): "a local master's session only",
    ("syphon.app.classarchive", "_finish"): "registered by write_at_exit, local sessions only",
    ("syphon.app.pyworkers", "_warm"): "started for a local master's session only (services)",
    ("syphon.job.failures", "local_jvm_exited"): "a Connect session has no active SparkContext",
    ("syphon.job.request", "_describe_jobs"): "a Connect session has no active SparkContext",
}

SRC = Path(__file__).resolve().parents[2] / "src"


def classic_only_uses() -> set[tuple[str, str]]:
    """(module, enclosing function) of every use of a classic-only attribute."""
    found = set()
    for path in sorted((SRC / "syphon").rglob("*.py")):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                name = None
                if isinstance(node, ast.Attribute) and node.attr in CLASSIC_ONLY:
                    name = node.attr
                elif (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and node.value in CLASSIC_ONLY
                ):
                    name = node.value  # getattr(x, "_gateway")
                if name is not None:
                    found.add((module, func.name))
        for node in tree.body:  # module level: never guarded
            for inner in ast.walk(node):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    break
                if isinstance(inner, ast.Attribute) and inner.attr in CLASSIC_ONLY:
                    found.add((module, "<module>"))
    return found


def test_only_guarded_places_reach_for_what_a_connect_session_lacks() -> None:
    uses = classic_only_uses()
    assert uses - set(GUARDED) == set()


def test_the_list_names_only_places_that_still_reach_for_it() -> None:
    assert set(GUARDED) - classic_only_uses() == set()
