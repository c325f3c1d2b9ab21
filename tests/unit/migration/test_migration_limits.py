"""The migrations' limits (how many run at once) and the watchdog of a running copy (no
progress, deadline): pure decisions over LibvirtMigration objects and job statistics."""

from __future__ import annotations

import datetime as dt
from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.migration.limits import (
    CLAIM_SECONDS,
    GIB,
    MigrationLimits,
    Watchdog,
    deadline_seconds,
    over_limit,
)

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _mig(name: str, phase: str | None = None, source: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if phase is not None:
        status["phase"] = phase
    if source is not None:
        status["source"] = source
    return {"metadata": {"namespace": "ns", "name": name}, "status": status}


def test_a_host_sends_at_most_its_limit_and_ended_or_waiting_ones_do_not_count() -> None:
    others = [
        _mig("a", c.MIGRATION_PHASE_MIGRATING, "h1"),
        _mig("b", c.MIGRATION_PHASE_SUCCEEDED, "h1"),
        _mig("c", c.MIGRATION_PHASE_PENDING),
        _mig("d", c.MIGRATION_PHASE_FAILED, "h1"),
    ]
    me = _mig("me")
    assert over_limit(me, [*others, me], host="h1", limits=MigrationLimits(per_host=2)) is None
    others.append(_mig("e", c.MIGRATION_PHASE_PREPARING, "h1"))
    verdict = over_limit(me, [*others, me], host="h1", limits=MigrationLimits(per_host=2))
    assert verdict is not None
    assert verdict.reason == c.MIGRATION_REASON_HOST_LIMIT
    assert "ns/a, ns/e" in verdict.message
    assert "--migration-max-per-host" in verdict.message
    # Another host's migrations are not this host's.
    assert over_limit(me, others, host="h2", limits=MigrationLimits(per_host=2)) is None


def test_the_candidate_never_counts_itself() -> None:
    me = _mig("me", c.MIGRATION_PHASE_PREPARING, "h1")
    assert over_limit(me, [me], host="h1", limits=MigrationLimits(per_host=1)) is None


def test_the_cluster_limit_counts_every_hosts_running_migrations() -> None:
    running = [_mig(f"m{i}", c.MIGRATION_PHASE_MIGRATING, f"h{i}") for i in range(3)]
    limits = MigrationLimits(per_host=2, per_cluster=3)
    verdict = over_limit(_mig("me"), running, host="h9", limits=limits)
    assert verdict is not None
    assert verdict.reason == c.MIGRATION_REASON_CLUSTER_LIMIT
    assert "3 migrations already run" in verdict.message
    assert over_limit(_mig("me"), running[:2], host="h9", limits=limits) is None


def test_the_deadline_grows_with_the_data() -> None:
    assert deadline_seconds(GIB, 150) == 150
    assert deadline_seconds(GIB // 4, 150) == 37.5
    assert deadline_seconds(3 * GIB, 10) == 30


def _stats(memory_left: int, disk_left: int = 0, total: int = GIB // 4) -> dict[str, int]:
    return {
        "memory_total": total,
        "memory_remaining": memory_left,
        "disk_total": 0,
        "disk_remaining": disk_left,
        "memory_bps": 2**20,
    }


def test_shrinking_bytes_are_progress_and_a_plateau_is_not() -> None:
    limits = MigrationLimits(no_progress_seconds=10, deadline_seconds_per_gib=1000)
    dog = Watchdog(limits, started=T0)
    for second, left in enumerate((100, 90, 80, 70)):
        assert dog.observe(T0 + dt.timedelta(seconds=second * 5), _stats(left * 2**20)) is None
    # At 15 s, 70 MiB left; it goes up and down but never below 70 again.
    assert dog.observe(T0 + dt.timedelta(seconds=20), _stats(75 * 2**20)) is None
    assert dog.observe(T0 + dt.timedelta(seconds=25), _stats(70 * 2**20)) is None
    verdict = dog.observe(T0 + dt.timedelta(seconds=26), _stats(72 * 2**20))
    assert verdict is not None
    assert verdict.reason == c.MIGRATION_REASON_NO_PROGRESS
    assert "did not shrink for 11 s" in verdict.message
    assert "72.0 MiB of memory" in verdict.message
    assert "the least seen: 70.0 MiB" in verdict.message


def test_no_report_at_all_counts_as_no_progress() -> None:
    dog = Watchdog(MigrationLimits(no_progress_seconds=5), started=T0)
    assert dog.observe(T0 + dt.timedelta(seconds=5), None) is None
    verdict = dog.observe(T0 + dt.timedelta(seconds=6), None)
    assert verdict is not None
    assert verdict.reason == c.MIGRATION_REASON_NO_PROGRESS
    assert "libvirt reported no progress" in verdict.message


def test_a_copy_longer_than_its_deadline_is_given_up_even_while_it_progresses() -> None:
    # 256 MiB at 40 s per GiB: 10 s.
    dog = Watchdog(MigrationLimits(deadline_seconds_per_gib=40), started=T0)
    for second in range(11):
        left = (200 - second) * 2**20
        assert dog.observe(T0 + dt.timedelta(seconds=second), _stats(left)) is None
    verdict = dog.observe(T0 + dt.timedelta(seconds=11), _stats(189 * 2**20))
    assert verdict is not None
    assert verdict.reason == c.MIGRATION_REASON_DEADLINE_EXCEEDED
    assert "the deadline for 256.0 MiB of memory and disk is 10 s" in verdict.message
    assert "189.0 MiB of memory" in verdict.message


def test_the_memory_stage_after_the_disk_mirror_starts_the_lowest_again() -> None:
    """libvirt mirrors the disks first (memory not begun: 0 left, 0 sent), then sends memory:
    the bytes left jump from the mirror's last figure to the memory's size. Neither the zeros
    nor the mirror's low figure hold the memory stage back."""
    dog = Watchdog(
        MigrationLimits(no_progress_seconds=10, deadline_seconds_per_gib=1000), started=T0
    )
    zeros = {"memory_total": 0, "memory_remaining": 0, "memory_processed": 0}
    assert dog.observe(T0 + dt.timedelta(seconds=1), {**zeros, "disk_remaining": 0}) is None
    assert dog.observe(T0 + dt.timedelta(seconds=2), {**zeros, "disk_remaining": 8 * 2**20}) is None
    assert dog.observe(T0 + dt.timedelta(seconds=3), {**zeros, "disk_remaining": 2**20}) is None
    memory = {"memory_total": GIB // 4, "disk_remaining": 0}
    for second, left in ((4, 200), (9, 190), (18, 180)):
        stats = {**memory, "memory_processed": 2**20, "memory_remaining": left * 2**20}
        assert dog.observe(T0 + dt.timedelta(seconds=second), stats) is None
    stats = {**memory, "memory_processed": 2**20, "memory_remaining": 185 * 2**20}
    verdict = dog.observe(T0 + dt.timedelta(seconds=29), stats)
    assert verdict is not None
    assert verdict.reason == c.MIGRATION_REASON_NO_PROGRESS
    assert "the least seen: 180.0 MiB" in verdict.message


def test_the_deadline_counts_the_guests_memory_while_only_disks_are_reported() -> None:
    """While libvirt mirrors the disks it reports no memory to copy (0): 4 MiB of disk alone
    would make a deadline under a second. The guest's memory size from its definition counts
    instead: 256 MiB + 4 MiB at 40 s per GiB is about 10 s."""
    limits = MigrationLimits(no_progress_seconds=100, deadline_seconds_per_gib=40)
    mirror = {
        "memory_total": 0,
        "memory_remaining": 0,
        "memory_processed": 0,
        "disk_total": 4 << 20,
    }
    dog = Watchdog(limits, started=T0, memory_bytes=256 << 20)
    for second in range(1, 10):
        left = {**mirror, "disk_remaining": (4 << 20) - second * 2**18}
        assert dog.observe(T0 + dt.timedelta(seconds=second), left) is None, second
    verdict = dog.observe(T0 + dt.timedelta(seconds=11), {**mirror, "disk_remaining": 2**18})
    assert verdict is not None
    assert verdict.reason == c.MIGRATION_REASON_DEADLINE_EXCEEDED
    assert "the deadline for 260.0 MiB of memory and disk is 10 s" in verdict.message
    # Without the guest's size (as before), the same first report ends the copy at once.
    unsized = Watchdog(limits, started=T0)
    early = unsized.observe(T0 + dt.timedelta(seconds=2), {**mirror, "disk_remaining": 4 << 20})
    assert early is not None
    assert early.reason == c.MIGRATION_REASON_DEADLINE_EXCEEDED


def _claimed(name: str, at: dt.datetime) -> dict[str, Any]:
    mig = _mig(name, c.MIGRATION_PHASE_PENDING)
    mig["status"]["slotClaimedAt"] = at.isoformat().replace("+00:00", "Z")
    return mig


def test_a_fresh_claim_counts_as_running_for_the_cluster_and_a_stale_one_does_not() -> None:
    limits = MigrationLimits(per_host=2, per_cluster=2)
    running = [_mig("m0", c.MIGRATION_PHASE_MIGRATING, "h0")]
    claim = _claimed("other", T0)
    now = T0 + dt.timedelta(seconds=1)
    verdict = over_limit(_mig("me"), [*running, claim], host="h9", limits=limits, now=now)
    assert verdict is not None
    assert verdict.reason == c.MIGRATION_REASON_CLUSTER_LIMIT
    assert "ns/other" in verdict.message
    # Without the time, claims are not looked at; a claim older than CLAIM_SECONDS is one whose
    # daemon died between claiming and starting.
    assert over_limit(_mig("me"), [*running, claim], host="h9", limits=limits) is None
    late = T0 + dt.timedelta(seconds=CLAIM_SECONDS + 1)
    assert over_limit(_mig("me"), [*running, claim], host="h9", limits=limits, now=late) is None
    # The candidate's own claim never counts, and a claim left on a started or ended migration
    # is not a second count of it.
    mine = _claimed("me", T0)
    assert over_limit(mine, [*running, mine], host="h9", limits=limits, now=now) is None
    ended = _claimed("done", T0)
    ended["status"]["phase"] = c.MIGRATION_PHASE_FAILED
    assert over_limit(_mig("me"), [*running, ended], host="h9", limits=limits, now=now) is None
