"""Prints a cosmic-ray session's mutation score and its surviving mutants.

    python tests/mutation/score.py SESSION.sqlite NAME

The score counts a mutant as killed when the tests failed on it (or it could not even
run: "incompetent"); a survivor is a change to the module that every test accepted.
Survivors are either killed by a new test or explained in tests/MUTANTS.md. Exits 1 when
a job is still pending (an interrupted session).
"""

from __future__ import annotations

import sys
from collections import Counter

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome


def main(path: str, name: str) -> int:
    with use_db(path, WorkDB.Mode.open) as db:
        done = list(db.completed_work_items)
        pending = db.num_work_items - len(done)
    outcomes: Counter[str] = Counter()
    survivors = []
    for item, result in done:
        if result.worker_outcome == WorkerOutcome.SKIPPED:
            outcomes["skipped"] += 1
        elif result.test_outcome == TestOutcome.SURVIVED:
            outcomes["survived"] += 1
            survivors.append((item, result))
        else:
            outcomes["killed"] += 1
    judged = outcomes["killed"] + outcomes["survived"]
    score = 100.0 * outcomes["killed"] / judged if judged else 0.0
    print(
        f"{name}: {score:.1f}% killed ({outcomes['killed']} of {judged} mutants; "
        f"{outcomes['skipped']} skipped by filters, {pending} pending)"
    )
    for item, result in sorted(survivors, key=lambda s: s[0].mutations[0].start_pos):
        m = item.mutations[0]
        print(f"  survived: {m.module_path}:{m.start_pos[0]} {m.operator_name} #{m.occurrence}")
        for line in (result.diff or "").splitlines()[2:]:
            if line.startswith(("+", "-")):
                print(f"      {line}")
    return 1 if pending else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
