"""Crash safety: ``syphon run`` killed with SIGKILL at stage boundaries and in the middle
of the replay and of the settle, then run again (the scenario behind tests/job/test_crash*.py,
split in two files so that test workers run the halves side by side).

A run killed inside a Spark task (``mid_replay``, ``mid_settle``) or right after the
replay's commit is a real ``syphon run`` process (its own Spark, its own clients) with a
fail point armed (:mod:`syphon.obs.failpoints`), killed with SIGKILL. The other stage
boundaries on the driver are reached in the test's process (:func:`stop_dead_in_process`):
the fail point raises an exception that no handler of the run catches and the lease is
left to expire, which leaves the audit, the ledger, the lease and the queues as a
SIGKILL there does — nothing is in flight at a stage boundary — without a cold Spark per
killed process, most of these tests' cost (350 -> 257 CPU-seconds for both files). The
last run happens in the test's process.
After it: nothing is lost, the backlog is empty, the destination with duplicate
detection holds every message exactly once, and on the one without it a message may be
there twice only if the audit marks its second send ``resent_in_doubt``.

A run killed in the middle of its replay or after the replay's commit is also resumed at
once, as ``syphon replay --run-id`` would (:func:`resume_the_killed_run`): the replay's
journal (syphon.job.replay.journal) tells it which of the killed attempt's transfers ended and
which were cut off.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusMessage

from servicebus_emulator import QueueSpec
from support.paired_env import BACKLOG_QUEUES, PRIMARY, job_config, make_pair, run_job, send_raw
from support.waiting import wait_until
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.store.audit import AUDIT_TABLE, RUNS_TABLE
from syphon.store.delta import read_table
from syphon.store.lease import LeaseLog
from syphon.store.location import Location, as_location

SYPHON = Path(sys.executable).parent / "syphon"

#: The destination with duplicate detection. A replay task sends its packing groups in
#: the order of their names (primary, destination, key), so this one's batches go after
#: those of ``orders``, which has none: the batch a kill in the middle of the replay cuts
#: off is one of ``orders``', and its resend shows there as a second copy.
UNIQUE = "unique"

#: Bytes added to each message's body (see :func:`add_round`).
PADDING = 40_000

#: The fail points, in stage order, each with the count a task point waits for.
POINTS = [
    "after_plan",
    "after_replaying",
    "mid_replay:3",
    "after_replay_commit",
    "after_replayed",
    "mid_settle:2",
    "after_settle_commit",
]


def add_round(pair: Any, r: int, sent: dict[str, str]) -> None:
    """Fresh work for round ``r``: on every backlog queue two messages for a queue without
    duplicate detection (partition keys shared across rounds) and two for one with it,
    and one invalid message on queue 0. Bodies of 40 KB: a destination's batches hold
    many keys, and a round must still take several batches per destination for a kill
    in the middle of the replay to fall between two of them."""
    for q in range(BACKLOG_QUEUES):
        batch = []
        for i in range(2):
            for dest in ("orders", UNIQUE):
                mid = f"{dest}-r{r}-q{q}-{i}"
                key = f"k{(q + i) % 3}"
                batch.append(
                    to_backlog_message(
                        ServiceBusMessage(
                            f"body {mid}".encode() + bytes(PADDING),
                            message_id=mid,
                            partition_key=key,
                        ),
                        dest,
                    )
                )
                sent[mid] = dest
        if q == 0:
            batch.append(
                to_backlog_message(ServiceBusMessage(b"?", message_id=f"bad-r{r}"), "nowhere")
            )
        send_raw(pair, q, batch)


#: Points reached in the test's process (see the module docstring); the rest are SIGKILLs.
IN_PROCESS = ("after_plan", "after_replaying", "after_replayed", "after_settle_commit")


class StoppedDead(BaseException):
    """What an in-process fail point raises: a BaseException, so that no ``except
    Exception`` of the run records anything, as after a SIGKILL."""


def stop_dead_in_process(config: Any, spark: Any, point: str) -> None:
    """``syphon run`` in the test's process until the driver-side fail point ``point``,
    where it stops dead: nothing more is recorded and the lease is not released (its
    heartbeat stops; the lease expires as a killed run's does)."""
    import pytest

    from syphon.obs import failpoints
    from syphon.store.lease import Lease

    def check(name: str) -> None:
        if name == point:
            raise StoppedDead(point)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(failpoints, "check", check)
        patch.setattr(Lease, "release", Lease.stop_heartbeat)
        with pytest.raises(StoppedDead):
            run_job(config, spark)


def start_killed_run(tmp_path: Path, point: str) -> subprocess.Popen[str]:
    """``syphon run`` as a process of its own, to be killed with SIGKILL at ``point``."""
    return subprocess.Popen(
        [str(SYPHON), "run", "--config", str(tmp_path / "syphon.yaml")],
        # one core: a killed run's parallelism is not what is tested, and one Python
        # worker per pool instead of two is about 12 % less CPU for the suite's
        # costliest files (163.7 -> 143.7 CPU-seconds for test_crash_settle.py)
        env={**os.environ, "SYPHON_FAILPOINT": point, "SYPHON__SPARK__MASTER": "local[1]"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill_with_sigkill(tmp_path: Path, point: str) -> None:
    """``syphon run`` as a process of its own, killed with SIGKILL at ``point``."""
    assert_killed(start_killed_run(tmp_path, point), point)


def assert_killed(process: subprocess.Popen[str], point: str) -> None:
    stdout, stderr = process.communicate(timeout=240)
    assert process.returncode == -signal.SIGKILL, (point, stdout[-3000:], stderr[-3000:])


def backlog_ids(pair: Any) -> set[str]:
    out: set[str] = set()
    for q in range(BACKLOG_QUEUES):
        entity = pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/{q}")
        out |= {str(m.message_id) for m in entity.messages.values()}
    return out


def settled_safely(root: Path | Location, table: str = AUDIT_TABLE) -> set[str]:
    """MessageIds whose removal from the backlog the committed audit (the Delta table
    ``table`` under ``root``) allows: a plan verdict settled without a send, or a
    recorded ``sent``."""
    rows = read_table(as_location(root).child(table)).to_pylist()
    return {
        r["message_id"]
        for r in rows
        if (
            r["stage"] == "plan"
            and r["verdict"] in ("duplicate", "expired", "ping", "invalid", "conflict")
        )
        or (r["stage"] == "replay" and r["outcome"] == "sent")
    }


#: The backlog queues' lock duration in the crash tests: a killed run's locks hold until
#: they lapse, as the service keeps them (tests/emulator/test_locks.py), and the next
#: run is started once they have.
LOCK_SECONDS = 3


def short_locks(pair: Any, seconds: float = LOCK_SECONDS) -> None:
    """Gives the backlog queues a lock duration of ``seconds``."""
    for q in range(BACKLOG_QUEUES):
        entity = pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/{q}")
        pair.secondary.broker.update_queue(
            replace(entity.spec, lock_duration=timedelta(seconds=seconds))
        )


def locked(pair: Any) -> int:
    """How many backlog messages are locked now (by the local Service Bus's clock)."""
    now = pair.secondary.broker.clock.now_ms()
    return sum(
        1
        for q in range(BACKLOG_QUEUES)
        for m in pair.secondary.broker.entity(
            f"{PRIMARY}/x-servicebus-transfer/{q}"
        ).messages.values()
        if m.lock_token is not None and (m.locked_until_ms or 0) > now
    )


def wait_for_the_killed_runs_locks(pair: Any) -> None:
    """Returns once no backlog message is locked: what a killed run held has lapsed (a
    scheduled run starts after the lease's expiry, longer than the locks')."""
    wait_until(lambda: locked(pair) == 0, timeout=60, what="the killed run's locks lapse")


def free_the_killed_runs_lease(root: Path | Location | LeaseLog) -> None:
    """Releases the killed run's lease in its holder's name: the next run finds it free,
    as it would once the lease expired, without the test waiting out its TTL by the
    wall clock (expiry itself: tests/unit/test_lease.py). ``root``: the audit path, or
    the lease's log."""
    from syphon.store.lease import Lease

    holder = Lease(root, "observer", timedelta(seconds=1)).state().holder
    if holder is not None:
        in_its_name = Lease(root, "killed", timedelta(seconds=1))
        in_its_name.holder = holder  # the exact holder, its attempt's suffix included
        in_its_name.release()
        assert Lease(root, "observer", timedelta(seconds=1)).state().holder is None


def killed_run_id(root: Path | Location) -> str:
    """The run the last kill interrupted: the latest in the ledger."""
    runs = read_table(as_location(root).child(RUNS_TABLE)).to_pylist()
    return str(max(runs, key=lambda r: r["recorded_at"])["run_id"])


def resume_the_killed_run(
    config: Any, spark: Any, pair: Any, point: str, before: dict[str, Counter[str]]
) -> None:
    """``syphon replay --run-id`` on the run just killed at ``point``: nothing whose send
    was committed is sent again, and every message the killed attempt may have sent is
    marked ``resent_in_doubt`` when it is sent again. ``before``: the destinations'
    messages before the killed run started."""
    root = Path(config.audit.path)
    run_id = killed_run_id(root)
    after_kill = {d: destination_ids(pair, d) for d in ("orders", UNIQUE)}
    resumed = run_job(config, spark, run_id, resume=True)
    assert resumed.status == "done", (point, resumed)
    if point == "after_replay_commit":  # every send committed: nothing is sent again
        assert resumed.operations.replay_messages_sent == 0, point
        assert {d: destination_ids(pair, d) for d in ("orders", UNIQUE)} == after_kill
        return
    # killed mid-replay: the journal says which of its transfers ended (those are not
    # sent again) and which started without an outcome (in doubt: sent again, marked).
    # Every mark is a message that did arrive before: the doubt is precise
    rows = read_table(root / AUDIT_TABLE).to_pylist()
    marked = {
        r["message_id"]
        for r in rows
        if r["run_id"] == run_id and r["stage"] == "replay" and r["detail"] == "resent_in_doubt"
    }
    sent_by_the_killed = {m for d in after_kill for m in after_kill[d] - before[d]}
    assert sent_by_the_killed, point  # the fail point waits for three batches
    assert marked, point  # the kill cut a transfer off before its outcome was journaled
    assert marked <= sent_by_the_killed, (point, marked - sent_by_the_killed)
    now = {d: destination_ids(pair, d) for d in ("orders", UNIQUE)}
    for m in sent_by_the_killed - marked:  # journaled as sent: not sent again
        assert now["orders"][m] + now[UNIQUE][m] == 1, (point, m)
    assert all(n == 1 for n in destination_ids(pair, UNIQUE).values())


def everything_home(pair: Any, sent: dict[str, str]) -> tuple[Counter[str], Counter[str]]:
    """Checks that every message of ``sent`` (MessageId: destination) reached its
    destination, :data:`UNIQUE` (duplicate detection) exactly once, and that the backlog is
    empty; returns each destination's MessageIds with their copies."""
    orders, dd = destination_ids(pair, "orders"), destination_ids(pair, UNIQUE)
    assert set(orders) == {m for m, d in sent.items() if d == "orders"}
    assert set(dd) == {m for m, d in sent.items() if d == UNIQUE}
    assert all(n == 1 for n in dd.values())  # duplicate detection: exactly once
    assert not backlog_ids(pair)
    return orders, dd


def destination_ids(pair: Any, path: str) -> Counter[str]:
    return Counter(str(m.message_id) for m in pair.primary.broker.entity(path).messages.values())


def kill_at_each_then_finish(
    points: list[str],
    servicebus_emulator: Any,
    spark: Any,
    tmp_path: Path,
    monkeypatch: Any,
    resume: tuple[str, ...] = (),
) -> None:
    """Kills a run at each of ``points`` in turn (fresh work each round; the runs killed
    at a point of ``resume`` resumed at once), then lets a run finish, and checks that
    nothing was lost and every resend is marked."""
    pair = make_pair(servicebus_emulator)
    pair.primary.broker.declare(QueueSpec(UNIQUE, requires_duplicate_detection=True))
    # long enough that a busy machine does not lose it mid-run (renewed every 3 s); a
    # killed run's lease is waited out below
    config = job_config(pair, tmp_path, monkeypatch, extra="run:\n  lease_seconds: 10\n")
    short_locks(pair)
    root = Path(config.audit.path)
    sent: dict[str, str] = {}

    for r, point in enumerate(points):
        add_round(pair, r, sent)
        before = {d: destination_ids(pair, d) for d in ("orders", UNIQUE)}
        if point in IN_PROCESS:
            stop_dead_in_process(config, spark, point)
        else:
            kill_with_sigkill(tmp_path, point)
        # nothing left the backlog without its outcome in the audit
        gone = set(sent) | {f"bad-r{i}" for i in range(r + 1)}
        gone -= backlog_ids(pair)
        assert gone <= settled_safely(root), (point, gone - settled_safely(root))
        free_the_killed_runs_lease(root)
        wait_for_the_killed_runs_locks(pair)
        if point in resume:
            resume_the_killed_run(config, spark, pair, point, before)

    add_round(pair, len(points), sent)  # and the next scheduled run has work of its own
    last = run_job(config, spark)
    assert last.status == "done", last

    # nothing lost: every message reached its destination, the backlog is empty
    orders, _ = everything_home(pair, sent)
    dead = pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/0").dlq
    assert dead is not None
    assert sorted(str(m.message_id) for m in dead.messages.values()) == sorted(
        f"bad-r{i}" for i in range(len(points) + 1)
    )

    # a second copy only where the audit says the send was resent in doubt
    audit = read_table(root / AUDIT_TABLE).to_pylist()
    resent = {r["message_id"] for r in audit if r["detail"] == "resent_in_doubt"}
    twice = {m for m, n in orders.items() if n > 1}
    if any(p.startswith("mid_replay") for p in points):
        assert twice  # the run killed mid-replay had sent batches: sent again, marked
    assert twice <= resent
    assert all(n <= 2 for n in orders.values())
    runs = read_table(root / RUNS_TABLE).to_pylist()
    assert {r["status"] for r in runs} >= {"planned", "replaying", "replayed", "done"}
