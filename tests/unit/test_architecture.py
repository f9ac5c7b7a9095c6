"""The package shows its architecture: layers by boundary, no cycles, small modules.

Read from the source with ``ast`` (nothing is imported): every ``import`` of a module,
at its top or inside a function, is an edge; imports under ``if TYPE_CHECKING:`` are
for annotations only and are left out, except that the product (``syphon``) and the local
Service Bus (``servicebus_emulator``) have no cycle even through them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGES = ("syphon", "servicebus_emulator", "syphon_demo")

#: What each layer of the product may import (besides itself). ``core`` and ``obs`` are
#: the foundation; ``app`` is the top.
#: ``job``'s wings are layers of their own (``job.read`` is ``syphon.job.read`` and its
#: modules), above ``job``, the vocabulary they share, each importing only the wings
#: below it.
_BELOW_JOB = {"core", "obs", "servicebus", "store"}
ALLOWED = {
    "core": set(),
    "obs": {"core"},
    "servicebus": {"core", "obs"},
    "store": {"core", "obs"},
    "job": _BELOW_JOB,
    "job.replay": _BELOW_JOB | {"job"},
    "job.settle": _BELOW_JOB | {"job", "job.replay"},
    "job.read": _BELOW_JOB | {"job", "job.replay", "job.settle"},
    "job.plan": _BELOW_JOB | {"job", "job.replay", "job.settle", "job.read"},
    "job.run": _BELOW_JOB | {"job", "job.replay", "job.settle", "job.read", "job.plan"},
    "producer": {"core", "obs", "servicebus"},
}
ALLOWED["app"] = {
    "core",
    "obs",
    "servicebus",
    "store",
    "producer",
    *(w for w in ALLOWED if w.startswith("job")),
}

#: Third-party roots only one layer may import.
CONFINED = {"azure": "servicebus", "deltalake": "store", "pyarrow.fs": "store"}

#: The local Service Bus's modules: each one concern of the service (a store, a layer of
#: the broker, a protocol's frames, a document format) fits in this many lines.
EMULATOR_MAX_LINES = 600

#: About 400 lines: a module longer than that does more than one job. (The longest is
#: the envelope, a reader and the Spark expression that mirrors it, kept together.)
MAX_LINES = 420


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((SRC / pkg).rglob("*.py"))}


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, except what sits under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def imports(name: str, path: Path, with_annotations: bool = False) -> set[str]:
    """The absolute names ``name`` imports at run time (and, ``with_annotations``, for
    its annotations too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree) if with_annotations else _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            out.add(base)  # ``from a import b`` runs ``a`` (its __init__), then ``a.b``
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def graph(with_annotations: bool = False) -> dict[str, set[str]]:
    """Edges between this repository's modules (an import of ``a.b.c`` where ``a.b.c`` is
    a name inside module ``a.b`` counts as an edge to ``a.b``)."""
    mods = modules()
    edges: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets = set()
        for imported in imports(name, path, with_annotations):
            while imported and imported not in mods:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        edges[name] = targets
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, or None. A package's ``__init__`` that imports its own modules
    counts like any module: a child that imports its package (``from a import b``) then
    closes a cycle through it."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_there_is_no_import_cycle_anywhere() -> None:
    assert find_cycle(graph()) is None


def test_the_product_has_no_cycle_even_through_annotations() -> None:
    edges = graph(with_annotations=True)
    product = {
        m: {t for t in ts if t.startswith("syphon.")}
        for m, ts in edges.items()
        if m.startswith("syphon.")
    }
    assert find_cycle(product) is None


def test_the_local_service_bus_has_no_cycle_even_through_annotations() -> None:
    edges = graph(with_annotations=True)
    emulator = {
        m: {t for t in ts if t.startswith("servicebus_emulator")}
        for m, ts in edges.items()
        if m.startswith("servicebus_emulator")
    }
    assert find_cycle(emulator) is None


def test_no_module_of_the_local_service_bus_is_over_600_lines() -> None:
    long = {
        name: n
        for name, path in modules().items()
        if name.startswith("servicebus_emulator")
        and (n := len(path.read_text(encoding="utf-8").splitlines())) > EMULATOR_MAX_LINES
    }
    assert long == {}


def test_the_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(edges) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    # a child that imports its package, whose __init__ imports the child
    assert find_cycle({"p": {"p.m"}, "p.m": {"p"}}) == ["p", "p.m", "p"]


def layer_of(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "syphon" or len(parts) < 2:
        return None
    wing = ".".join(parts[1:3])
    if wing in ALLOWED:
        return wing
    return parts[1] if parts[1] in ALLOWED else None


def test_a_wing_is_its_own_layer_and_the_shared_vocabulary_is_the_job_layer() -> None:
    assert layer_of("syphon.job.read.waves") == "job.read"
    assert layer_of("syphon.job.read") == "job.read"
    assert layer_of("syphon.job.ledger") == "job"
    assert layer_of("syphon.job") == "job"
    assert layer_of("syphon.app.cli") == "app"


#: The most entries (modules and wings) at ``job/``'s top level: a newcomer finds the
#: stage to change among a few wings and the vocabulary they share.
JOB_MAX_ENTRIES = 16


def test_the_job_layer_keeps_a_short_top_level() -> None:
    job = SRC / "syphon" / "job"
    entries = [p.name for p in job.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()]
    assert len(entries) <= JOB_MAX_ENTRIES, sorted(entries)


def test_each_wing_says_what_it_owns_and_what_it_may_import() -> None:
    for wing in (w for w in ALLOWED if w.startswith("job.")):
        init = SRC / "syphon" / wing.replace(".", "/") / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert "Imports" in doc or "imports" in doc, wing


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_each_layer_imports_only_the_layers_below_it(layer: str) -> None:
    wrong = set()
    for name, targets in graph().items():
        if layer_of(name) != layer:
            continue
        for target in targets:
            other = layer_of(target)
            if target.startswith(("servicebus_emulator", "syphon_demo")):
                wrong.add((name, target))
            elif target.split(".")[0] == "syphon" and other is None and target != "syphon":
                wrong.add((name, target))  # a module outside the layers
            elif other is not None and other != layer and other not in ALLOWED[layer]:
                wrong.add((name, target))
    assert not wrong


def test_the_product_has_no_module_outside_its_layers() -> None:
    loose = [n for n in modules() if n.startswith("syphon.") and layer_of(n) is None]
    assert loose == []


def test_sdk_and_storage_libraries_stay_behind_their_boundary() -> None:
    wrong = set()
    for name, path in modules().items():
        if not name.startswith("syphon."):
            continue
        for imported in imports(name, path):
            for root, owner in CONFINED.items():
                if (imported == root or imported.startswith(root + ".")) and (
                    layer_of(name) != owner
                ):
                    wrong.add((name, imported))
    assert not wrong


def test_no_product_module_is_over_about_400_lines() -> None:
    long = {
        name: n
        for name, path in modules().items()
        if name.startswith("syphon")
        and not name.startswith("syphon_demo")
        and (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_run_ledger_is_written_from_one_module() -> None:
    """Every ledger row a run writes goes through ``job/ledger.py`` (the stores implement
    ``append_run``; nothing else in the product calls it)."""
    import ast

    callers = set()
    for path in sorted((SRC / "syphon").rglob("*.py")):
        if path.parent.name == "store":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "append_run":
                callers.add(str(path.relative_to(SRC / "syphon")))
    assert callers == {"job/ledger.py"}


def test_the_ledger_takes_results_and_nothing_outside_it_sets_its_fields() -> None:
    """The run hands the ledger what happened (``add``, ``planned``, ``at_wave``...) and
    it decides what its rows say: no module but its own assigns an attribute of a
    ``ledger`` (or ``_ledger``), nor mutates one in place."""
    wrong = set()
    for path in sorted((SRC / "syphon").rglob("*.py")):
        if path == SRC / "syphon" / "job" / "ledger.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[ast.expr] = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("update", "append", "setdefault", "pop", "clear")
            ):
                targets = [node.func.value]
            for target in targets:
                for part in ast.walk(target):
                    if (
                        isinstance(part, ast.Attribute)
                        and isinstance(part.value, (ast.Name, ast.Attribute))
                        and (getattr(part.value, "id", None) or part.value.attr).endswith("ledger")
                    ):
                        wrong.add(f"{path.relative_to(SRC)}:{node.lineno}")
    assert wrong == set()


def test_the_core_calls_neither_the_jvm_nor_libc() -> None:
    """``core/`` is schemas, column expressions and plain values: nothing in it reaches a
    session's JVM (``_jvm``, ``System.gc``) or the C library (``ctypes``); what tunes a
    session lives with it in ``app/`` (:mod:`syphon.app.on_demand`)."""
    wrong = set()
    for path in sorted((SRC / "syphon" / "core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("_jvm", "System"):
                wrong.add(f"{path.name}:{node.lineno}: {node.attr}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if "ctypes" in names or (
                    isinstance(node, ast.ImportFrom) and node.module == "ctypes"
                ):
                    wrong.add(f"{path.name}:{node.lineno}: ctypes")
    assert wrong == set()


#: The most parameters a function of the product takes: more, and its arguments want to
#: be a value (a dataclass) of their own.
MAX_PARAMETERS = 8


def _functions(path: Path) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The parameters a caller can pass (``self`` and ``cls`` are not counted)."""
    a = node.args
    named = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    if named and named[0].arg in ("self", "cls"):
        named = named[1:]
    return len(named) + (a.vararg is not None) + (a.kwarg is not None)


def test_no_function_of_the_product_takes_more_than_8_parameters() -> None:
    wide = {
        f"{name}.{node.name}": n
        for name, path in modules().items()
        if name.startswith("syphon.")
        for node in _functions(path)
        if (n := _parameters(node)) > MAX_PARAMETERS
    }
    assert wide == {}


def test_the_parameter_count_counts_what_a_caller_passes() -> None:
    tree = ast.parse("class C:\n    def f(self, a, /, b, *c, d, **e): ...\n")
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert _parameters(node) == 5


def test_the_wave_loop_reads_in_short_functions() -> None:
    """``job/run/loop.py`` is the loop over waves: each of its functions fits on a screen."""
    path = SRC / "syphon" / "job" / "run" / "loop.py"
    long = {
        node.name: n
        for node in _functions(path)
        if (n := (node.end_lineno or node.lineno) - node.lineno + 1) > 40
    }
    assert long == {}


def test_the_job_layer_holds_no_service_bus_sdk_object() -> None:
    """The settle names messages by sequence number (``servicebus/locked.py``) and the
    snapshot reads rows (``servicebus/peek.peek_queue``): no module of ``job/`` opens a
    namespace's client, calls a receiver's methods or reaches below the SDK."""
    sdk_calls = {
        "client",
        "receive_messages",
        "peek_messages",
        "complete_message",
        "dead_letter_message",
        "abandon_message",
        "get_queue_receiver",
        "peek_receiver",
        "peek_rows",
        "settle_tokens",
    }
    found = set()
    for path in sorted((SRC / "syphon" / "job").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
            if name in sdk_calls:
                found.add((path.name, name))
    assert found == set()


def test_held_means_held_back_and_nothing_else() -> None:
    """One meaning of "held" in the product (the README's Layout says which): a key or a
    destination held back. What a read keeps in peek-lock is locked, what waits for the
    operator is waiting."""
    import re

    other_sense = re.compile(r"held(?![ _-]?back)", re.IGNORECASE)
    found = [
        f"{path.relative_to(SRC)}:{n}: {line.strip()}"
        for path in sorted((SRC / "syphon").rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if other_sense.search(line)
    ]
    assert found == []
