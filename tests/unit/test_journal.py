"""The replay's journal (syphon.job.replay.journal) on a local folder: what a task journals
before and after each transfer, what a reader makes of it after a crash at any point,
and that a journal holds places and outcomes only."""

from __future__ import annotations

import json
from pathlib import Path

from support.python_rules import local_location
from syphon.job.replay.journal import TaskJournal, open_journal, read_journal, remove_journal

Q = "contoso/x-servicebus-transfer/0"


def test_a_wave_without_an_opened_journal_has_none(tmp_path: Path) -> None:
    assert read_journal(local_location(tmp_path), "run", "j1") is None


def test_a_transfer_journaled_before_it_starts_is_in_doubt_until_its_outcome_is(
    tmp_path: Path,
) -> None:
    root = local_location(tmp_path)
    folder = open_journal(root, "run", "j1")
    task = TaskJournal(folder, "0-0")
    assert read_journal(root, "run", "j1").in_doubt == set()  # type: ignore[union-attr]

    task.starting([(Q, 1), (Q, 2)])
    journal = read_journal(root, "run", "j1")
    assert journal is not None
    assert journal.in_doubt == {(Q, 1), (Q, 2)}  # a crash now: both in doubt

    task.finished([((Q, 1), "sent", None), ((Q, 2), "sent", None)])
    # the outcome waits for the next entry: a crash now leaves them in doubt still
    assert read_journal(root, "run", "j1").in_doubt == {(Q, 1), (Q, 2)}  # type: ignore[union-attr]

    task.starting([(Q, 3)])
    journal = read_journal(root, "run", "j1")
    assert journal is not None
    assert journal.outcomes == {(Q, 1): ("sent", None), (Q, 2): ("sent", None)}
    assert journal.in_doubt == {(Q, 3)}

    task.finished([((Q, 3), "failed", "ServiceBusError")])
    task.close()
    journal = read_journal(root, "run", "j1")
    assert journal is not None
    assert journal.in_doubt == set()
    assert journal.outcomes[(Q, 3)] == ("failed", "ServiceBusError")
    assert journal.started == {(Q, 1), (Q, 2), (Q, 3)}


def test_tasks_journal_side_by_side_and_a_journal_holds_places_and_outcomes_only(
    tmp_path: Path,
) -> None:
    root = local_location(tmp_path)
    folder = open_journal(root, "run", "j2")
    first, second = TaskJournal(folder, "0-0"), TaskJournal(folder, "1-0")
    first.starting([(Q, 1)])
    second.starting([(Q, 7)])
    first.finished([((Q, 1), "sent", None)])
    first.close()
    journal = read_journal(root, "run", "j2")
    assert journal is not None
    assert journal.in_doubt == {(Q, 7)}
    for path in (tmp_path / "journal" / "run" / "j2").iterdir():
        entry = json.loads(path.read_text())
        assert set(entry) <= {"results", "starting"}
        for value in entry.get("starting", []):
            assert len(value) == 2  # queue and sequence number
        for value in entry.get("results", []):
            assert len(value) == 4  # queue, sequence number, outcome, detail


def test_a_task_without_a_folder_journals_nothing_and_a_removed_journal_is_gone(
    tmp_path: Path,
) -> None:
    silent = TaskJournal(None, "0-0")
    silent.starting([(Q, 1)])
    silent.finished([((Q, 1), "sent", None)])
    silent.close()
    root = local_location(tmp_path)
    assert not (tmp_path / "journal").exists()
    open_journal(root, "run", "j3")
    TaskJournal(root.child("journal", "run", "j3"), "0-0").starting([(Q, 1)])
    remove_journal(root, "run")
    assert read_journal(root, "run", "j3") is None
    assert not (tmp_path / "journal" / "run").exists()
