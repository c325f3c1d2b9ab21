"""libvirt's job statistics as the migration's status shows them."""

from __future__ import annotations

from libvirt_provider.migration.progress import progress_of, result_of


def test_progress_takes_the_running_jobs_figures() -> None:
    stats = {
        "type": 2,
        "memory_total": 100,
        "memory_processed": 40,
        "memory_remaining": 60,
        "disk_total": 8,
        "disk_processed": 8,
        "disk_remaining": 0,
        "memory_bps": 5,
        "memory_iteration": 2,
        "time_elapsed": 900,
    }
    assert progress_of(stats) == {
        "memoryTotal": 100,
        "memoryProcessed": 40,
        "memoryRemaining": 60,
        "diskTotal": 8,
        "diskProcessed": 8,
        "diskRemaining": 0,
        "memoryBandwidth": 5,
        "iterations": 2,
        "elapsedMilliseconds": 900,
    }
    assert progress_of({"type": 2}) == {}


def test_the_result_takes_time_and_memory_from_the_target_and_disks_from_the_source() -> None:
    completed = {"time_elapsed": 4800, "downtime": 348, "memory_total": 100, "disk_total": 0}
    completed["memory_processed"] = 40
    result = result_of(completed, {"diskTotal": 8, "diskRemaining": 2})
    assert result == {
        "elapsedMilliseconds": 4800,
        "downtimeMilliseconds": 348,
        "memoryTotal": 100,
        "memoryProcessed": 40,
        "diskTotal": 8,
        "diskProcessed": 8,
    }
    assert result_of({}, None) == {}
