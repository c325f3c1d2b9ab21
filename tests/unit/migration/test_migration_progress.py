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


def test_a_last_report_from_before_the_mirror_ended_still_counts_the_whole_disk() -> None:
    """The source's last report came mid-mirror; the job then succeeded, which it can only
    once every byte of the disks crossed."""
    completed = {"time_elapsed": 1950, "downtime": 49, "memory_total": 100}
    last = {"diskTotal": 50, "diskProcessed": 43, "diskRemaining": 7}
    result = result_of(completed, last)
    assert (result["diskTotal"], result["diskProcessed"]) == (50, 50)
    # More processed than the total (blocks the guest wrote again were sent twice): kept.
    again = result_of(completed, {"diskTotal": 50, "diskProcessed": 56, "diskRemaining": 0})
    assert again["diskProcessed"] == 56
