"""How many migrations may run at once, and when a running one is given up: pure.

Two limits hold when the source's daemon is about to accept a migration: its host's outbound
migrations running at once, and the cluster's. What counts as running is read from the
LibvirtMigrations themselves (every daemon lists them from the API server at that moment): a
migration accepted and not ended, that is in phase `Preparing` or `Migrating`, and one whose
source claimed a slot a moment ago (`slotClaimedAt`, still `Pending`). One daemon accepts its
host's migrations under a lock, so the per-host limit is exact. The cluster's is made exact by
claiming before counting: the source writes its claim, lists again, and starts only if the
others (claims included) leave it a slot, otherwise it withdraws the claim and waits. Of
several sources claiming at once, the last to write its claim sees every earlier claim, so
they never start more than the limit together; at worst all of them wait and try again
(docs/migration.md, "Limits and ends").

While it runs, `Watchdog` watches the source's job statistics: no shrinking of the bytes left
(memory and disk) for the no-progress time, or a copy longer than its deadline (seconds per GiB
of memory and disk to copy), and the job is aborted.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from generic.formats import parse_time
from libvirt_provider import constants as c
from libvirt_provider.migration_api import MigrationPhase

__all__ = [
    "CLAIM_SECONDS",
    "GIB",
    "MigrationLimits",
    "Verdict",
    "Watchdog",
    "deadline_seconds",
    "over_limit",
    "running",
]

_RUNNING = frozenset({MigrationPhase.PREPARING.value, MigrationPhase.MIGRATING.value})
GIB = 2**30
# How long a claim counts: a claim is followed within a second by the start or its withdrawal;
# one whose daemon died in between must not hold a slot for ever.
CLAIM_SECONDS = 60.0


@dataclass(frozen=True)
class MigrationLimits:
    """The daemon's flags (docs/operations.md)."""

    per_host: int = c.MIGRATION_MAX_PER_HOST
    per_cluster: int = c.MIGRATION_MAX_PER_CLUSTER
    no_progress_seconds: float = c.MIGRATION_NO_PROGRESS_SECONDS
    deadline_seconds_per_gib: float = c.MIGRATION_DEADLINE_SECONDS_PER_GIB


@dataclass(frozen=True)
class Verdict:
    """Why a migration waits or was given up: a condition's reason and its message."""

    reason: str
    message: str


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


def _claimed(status: Mapping[str, Any], now: dt.datetime | None) -> bool:
    """A source claimed a slot for it less than `CLAIM_SECONDS` ago and has not started it."""
    if now is None or status.get("phase") not in (None, MigrationPhase.PENDING.value):
        return False
    claimed = parse_time(status.get("slotClaimedAt"))
    return claimed is not None and abs((now - claimed).total_seconds()) < CLAIM_SECONDS


def running(
    migrations: Iterable[Mapping[str, Any]], *, now: dt.datetime | None = None
) -> list[Mapping[str, Any]]:
    """The migrations accepted and not ended (Preparing or Migrating), and, given `now`, those
    a source claimed a slot for."""
    return [
        m
        for m in migrations
        if (status := m.get("status") or {}).get("phase") in _RUNNING or _claimed(status, now)
    ]


def over_limit(
    candidate: Mapping[str, Any],
    migrations: Iterable[Mapping[str, Any]],
    *,
    host: str,
    limits: MigrationLimits,
    now: dt.datetime | None = None,
) -> Verdict | None:
    """Why `candidate`, about to be accepted on `host`, must wait; None when it may start.
    Given `now`, other sources' fresh claims count as running.

    The candidate itself never counts (it is not running yet)."""
    me = _key(candidate)
    others = [m for m in running(migrations, now=now) if _key(m) != me]
    outbound = [m for m in others if (m.get("status") or {}).get("source") == host]
    if len(outbound) >= limits.per_host:
        return Verdict(
            c.MIGRATION_REASON_HOST_LIMIT,
            f"waiting: host {host} already sends {len(outbound)} migrations (at most "
            f"{limits.per_host} at once, --migration-max-per-host): "
            f"{_names(outbound)}; this one starts when one of them ends",
        )
    if len(others) >= limits.per_cluster:
        return Verdict(
            c.MIGRATION_REASON_CLUSTER_LIMIT,
            f"waiting: {len(others)} migrations already run in the cluster (at most "
            f"{limits.per_cluster} at once, --migration-max-per-cluster): {_names(others)}; "
            "this one starts when one of them ends",
        )
    return None


def _names(migrations: Iterable[Mapping[str, Any]]) -> str:
    return ", ".join(sorted(f"{ns}/{name}" for ns, name in map(_key, migrations)))


def deadline_seconds(total_bytes: int, per_gib: float) -> float:
    """The completion deadline of a copy of `total_bytes` (memory and disk)."""
    return per_gib * max(total_bytes, 0) / GIB


def _mib(value: int) -> str:
    return f"{value / 2**20:.1f} MiB"


class Watchdog:
    """One running copy's ends: fed the source's job statistics as they come, it says when
    the job must be aborted. Pure: the caller gives the time.

    No progress: the bytes left (memory and disk) did not fall below the least seen in the
    current stage (the disk mirror first, then memory) for the no-progress time; a guest that
    dirties its memory as fast as it is sent makes none, however many bytes go over the wire.
    The deadline: from the start of the copy, the seconds per GiB times the largest amount of
    memory and disk libvirt reported to copy. While libvirt mirrors the disks it reports no
    memory to copy yet, so the guest's own memory size (`memory_bytes`, from its definition)
    stands in for it: a deadline counted from the disks alone would abort a copy of a few MiB of
    disk within a second, before any memory was sent."""

    def __init__(
        self, limits: MigrationLimits, *, started: dt.datetime, memory_bytes: int = 0
    ) -> None:
        self._limits = limits
        self._started = started
        self._lowest: int | None = None
        self._since = started
        self._memory = max(memory_bytes, 0)
        self._total = 0
        self._memory_stage = False

    def observe(self, now: dt.datetime, stats: Mapping[str, Any] | None) -> Verdict | None:
        """Take one report (`jobStats()` keys; None when libvirt gave none) and judge."""
        stats = stats or {}
        remaining = _sum(stats, "memory_remaining", "disk_remaining")
        total = _sum(stats, "memory_total", "disk_total")
        if total is not None:
            memory = max(_sum(stats, "memory_total") or 0, self._memory)
            self._total = max(self._total, memory + (_sum(stats, "disk_total") or 0))
        # With local disks, libvirt mirrors the disks first and sends memory after: the bytes
        # left restart from the memory's size then, so the lowest seen restarts with the stage.
        # A report of nothing left is no bound to hold the job to (a stage not begun, or the
        # very end), so it is not taken as the lowest.
        memory_stage = bool(stats.get("memory_processed"))
        if memory_stage != self._memory_stage:
            self._memory_stage = memory_stage
            self._lowest = None
            self._since = now
        if remaining and (self._lowest is None or remaining < self._lowest):
            self._lowest = remaining
            self._since = now
        elapsed = (now - self._started).total_seconds()
        deadline = deadline_seconds(self._total, self._limits.deadline_seconds_per_gib)
        if self._total and elapsed > deadline:
            return Verdict(
                c.MIGRATION_REASON_DEADLINE_EXCEEDED,
                f"aborted after {elapsed:.0f} s: the deadline for {_mib(self._total)} of "
                f"memory and disk is {deadline:.0f} s "
                f"({self._limits.deadline_seconds_per_gib:g} s per GiB, "
                f"--migration-deadline-per-gib); {_left(stats, self._lowest)}",
            )
        stalled = (now - self._since).total_seconds()
        if stalled > self._limits.no_progress_seconds:
            return Verdict(
                c.MIGRATION_REASON_NO_PROGRESS,
                f"aborted after {elapsed:.0f} s: the bytes left did not shrink for "
                f"{stalled:.0f} s (at most {self._limits.no_progress_seconds:g} s, "
                f"--migration-no-progress-timeout); {_left(stats, self._lowest)}",
            )
        return None


def _sum(stats: Mapping[str, Any], *keys: str) -> int | None:
    values = [stats[k] for k in keys if isinstance(stats.get(k), int)]
    return sum(values) if values else None


def _left(stats: Mapping[str, Any], lowest: int | None) -> str:
    memory = stats.get("memory_remaining")
    disk = stats.get("disk_remaining")
    if not isinstance(memory, int) and not isinstance(disk, int):
        return "libvirt reported no progress of the job"
    parts = []
    if isinstance(memory, int):
        parts.append(f"{_mib(memory)} of memory")
    if isinstance(disk, int):
        parts.append(f"{_mib(disk)} of disk")
    lowest_part = f" (the least seen: {_mib(lowest)})" if lowest is not None else ""
    bandwidth = stats.get("memory_bps")
    speed = f", at {_mib(bandwidth)}/s" if isinstance(bandwidth, int) else ""
    return f"{' and '.join(parts)} were left{lowest_part}{speed}"
