"""Where a run's frames are kept (syphon.job.context.keep): a run in waves on local
disk, a run of one wave in memory, as its caller says."""

from __future__ import annotations

from typing import Any

from syphon.job.context import keep


def _new_level(spark: Any, before: set[int]) -> Any:
    rdds = dict(spark.sparkContext._jsc.getPersistentRDDs())
    (added,) = [rdd for key, rdd in rdds.items() if key not in before]
    return added.getStorageLevel()


def test_a_run_in_waves_keeps_its_frames_on_disk_and_a_run_of_one_wave_in_memory(
    spark: Any,
) -> None:
    for on_disk in (True, False):
        before = set(dict(spark.sparkContext._jsc.getPersistentRDDs()))
        kept = keep(spark.range(7), on_disk=on_disk)
        level = _new_level(spark, before)
        assert (level.useDisk(), level.useMemory()) == (True, not on_disk), on_disk
        assert kept.count() == 7
