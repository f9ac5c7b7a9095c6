"""No test waits on the real clock for what a clock or an event can tell.

Every ``time.sleep(...)`` and ``asyncio.sleep(...)`` in the test tree is read with
``ast``: one of at most 0.05 s (a poll between looks at something that will happen) is
fine; any other is listed below with the reason no clock or event can stand in for it.
A new long sleep fails here until it is replaced (an injected clock: ``ManualClock`` and
``Emulator.advance`` for the local Service Bus, ``ManualTimer`` for the producer; an
event: ``support.waiting.wait_until``) or listed with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
LONGEST_POLL = 0.05

#: (file under tests/, the call as written): why it waits on the wall clock.
ALLOWED = {
    (
        "support/waiting.py",
        "time.sleep(POLL_SECONDS)",
    ): "the poll of wait_until itself (POLL_SECONDS is 0.01)",
    ("emulator/test_async.py", "asyncio.sleep(POLL_SECONDS)"): "the same poll, in an event loop",
    (
        "support/latency_proxy.py",
        "time.sleep(wait)",
    ): "the benchmarks' delay proxy: holding bytes for the latency it simulates is its job",
    (
        "benchmarks/proctree.py",
        "time.sleep(SAMPLE_SECONDS)",
    ): "a benchmark samples its process tree's CPU and memory at an interval",
    (
        "spark/test_progress.py",
        "time.sleep(1.5)",
    ): "the Spark task must still be running when the progress reporter looks: the work "
    "observed, not a wait",
    (
        "job/test_lean_links.py",
        "time.sleep(seconds)",
    ): "the SDK's own sleeps, recorded and passed through unchanged",
    (
        "unit/test_waves.py",
        "time.sleep(0.2)",
    ): "that a wave's read does not start before the caller says the wave is planned: "
    "what is observed is that nothing happens, which no event can tell",
    (
        "job/test_plan_verdicts.py",
        "time.sleep(1.1)",
    ): "a message's time to live runs out by the wall clock of the run (syphon's verdict "
    "on the Spark side; the SDK checks locks by the same clock, so the namespace's "
    "clock cannot be moved instead)",
    (
        "job/test_run.py",
        "time.sleep(max(0.0, parked_at + 1.1 - time.monotonic()))",
    ): "the same: a parked message's one-second time to live runs out before the run",
    (
        "job/test_run.py",
        "time.sleep(max(0.0, wait) + 0.5)",
    ): "the same: a message expires between a plan and its resumed run",
}


def _seconds(call: ast.Call) -> float | None:
    """The call's argument when it is a number written out, else None."""
    if len(call.args) == 1 and isinstance(call.args[0], ast.Constant):
        value = call.args[0].value
        if isinstance(value, (int, float)):
            return float(value)
    return None


def sleeps(root: Path = TESTS) -> list[tuple[str, str]]:
    """Every sleep longer than a poll, or of a length not written out: (file, call)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if "node_modules" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            named = isinstance(owner, ast.Name) and owner.id in ("time", "asyncio")
            if node.func.attr != "sleep" or not named:
                continue
            seconds = _seconds(node)
            if seconds is not None and seconds <= LONGEST_POLL:
                continue
            found.append((path.relative_to(root).as_posix(), ast.unparse(node)))
    # the same call twice in one file (a module-level script, say) is one entry
    return sorted(set(found))


def test_every_long_sleep_is_listed_with_its_reason() -> None:
    assert [s for s in sleeps() if s not in ALLOWED] == []


def test_every_listed_sleep_is_still_there() -> None:
    assert sorted(set(ALLOWED) - set(sleeps())) == []


def test_the_check_finds_a_long_sleep_and_lets_a_poll_pass(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        "import asyncio, time\n"
        "time.sleep(0.05)\n"
        "time.sleep(0.3)\n"
        "async def f(): await asyncio.sleep(2)\n"
        "time.sleep(n)\n",
        encoding="utf-8",
    )
    assert sleeps(tmp_path) == [
        ("test_x.py", "asyncio.sleep(2)"),
        ("test_x.py", "time.sleep(0.3)"),
        ("test_x.py", "time.sleep(n)"),
    ]
