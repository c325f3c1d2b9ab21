"""The decisions of one snapshot pass, as pure functions: which of the machine's disks are copied,
whether the copies fit, which consistency was achieved, and what the status says.

The shell (`reconciler.py`) reads the objects and the domain, asks these, and acts.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lxml import etree

from generic.conditions import DesiredCondition, merge_conditions
from libvirt_provider import constants as c
from libvirt_provider.domainxml import DISK_ALIAS_PREFIX
from libvirt_provider.snapshot.names import is_pending_overlay, pending_overlay_name
from libvirt_provider.snapshot_api import Consistency

__all__ = [
    "Problem",
    "SourceDisk",
    "achieved_consistency",
    "dependents",
    "domain_disks",
    "missing_space",
    "ready_condition",
    "select_disks",
]

_DATA_PREFIX = "data-"
# A copy is the machine's writes plus qcow2 metadata; a pending overlay starts at a few hundred
# KiB. This much beyond the volumes' allocation is asked of a pool before a copy starts.
_HEADROOM_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class SourceDisk:
    """A disk of the machine's domain as the snapshot sees it."""

    name: str  # bootDisk, or the VM's data disk name
    target: str  # vda, sdb, ...: the device name libvirt's block calls take
    pool: str | None  # the volume's pool (None when the disk is on a file path)
    volume: str | None
    path: str | None  # the file path, for a disk whose source is a file (a pending overlay)
    format: str

    @property
    def pending(self) -> bool:
        """Whether the disk currently writes into some snapshot's pending overlay."""
        return self.path is not None and is_pending_overlay(self.path)

    def pending_for(self, uid: str) -> bool:
        """Whether the disk writes into the pending overlay of the snapshot `uid`."""
        return self.path is not None and self.path.endswith(
            "/" + pending_overlay_name(uid, self.name)
        )


@dataclass(frozen=True)
class Problem:
    """Why a snapshot cannot be taken now: a condition reason and a message for people."""

    reason: str
    message: str
    retry: bool = True


def _disk_name(alias: str | None) -> str | None:
    if alias is None or not alias.startswith(DISK_ALIAS_PREFIX):
        return None
    device = alias[len(DISK_ALIAS_PREFIX) :]
    if device == "boot":
        return c.SNAPSHOT_BOOT_DISK
    if device.startswith(_DATA_PREFIX):
        return device[len(_DATA_PREFIX) :]
    return None


def domain_disks(xml: str | bytes) -> list[SourceDisk]:
    """The machine's disks (not its cloud-init CD-ROM) in a domain definition, by their VM names."""
    root = etree.fromstring(xml.encode() if isinstance(xml, str) else xml)
    found = []
    for element in root.findall("devices/disk"):
        if element.get("device", "disk") != "disk":
            continue
        alias = element.find("alias")
        name = _disk_name(alias.get("name") if alias is not None else None)
        source, target, driver = (
            element.find("source"),
            element.find("target"),
            element.find("driver"),
        )
        if name is None or source is None or target is None:
            continue
        found.append(
            SourceDisk(
                name=name,
                target=str(target.get("dev")),
                pool=source.get("pool"),
                volume=source.get("volume"),
                path=source.get("file"),
                format=(driver.get("type") if driver is not None else None) or "raw",
            )
        )
    return found


def select_disks(
    wanted: Sequence[str] | None, disks: Sequence[SourceDisk]
) -> list[SourceDisk] | Problem:
    """The disks to copy: those named (every one when none is), or why not."""
    by_name = {d.name: d for d in disks}
    if not wanted:
        chosen = list(disks)
    else:
        unknown = [name for name in wanted if name not in by_name]
        if unknown:
            return Problem(
                c.SNAPSHOT_REASON_UNKNOWN_DISK,
                f"the machine has no disk {', '.join(map(repr, unknown))}; its disks are "
                f"{', '.join(sorted(by_name)) or 'none'}",
                retry=False,
            )
        chosen = [by_name[name] for name in wanted]
    if not chosen:
        return Problem(
            c.SNAPSHOT_REASON_UNKNOWN_DISK, "the machine has no disk to copy", retry=False
        )
    for disk in chosen:
        if disk.pool is None or disk.volume is None:
            return Problem(
                c.SNAPSHOT_REASON_FAILED,
                f"disk {disk.name!r} is not on a pool volume (source {disk.path!r})",
            )
    return chosen


def missing_space(needed: Mapping[str, int], available: Mapping[str, int | None]) -> Problem | None:
    """Whether each pool has room for the copies: `needed` the bytes the source volumes take per
    pool, `available` each pool's free bytes (None: a pool that does not account space)."""
    short = []
    for pool, size in sorted(needed.items()):
        free = available.get(pool)
        if free is not None and size + _HEADROOM_BYTES > free:
            short.append(
                f"pool {pool!r} has {free} bytes free, the copy needs {size + _HEADROOM_BYTES}"
            )
    if short:
        return Problem(c.SNAPSHOT_REASON_POOL_FULL, "; ".join(short))
    return None


def achieved_consistency(
    wanted: Consistency, *, running: bool, agent_answered: bool | None
) -> Consistency | Problem:
    """What a copy taken now records, or why it must wait.

    A running machine's copy is Filesystem when the agent froze its file systems (`agent_answered`
    True), and Crash when it was not asked (Crash wanted) or did not answer (Auto). A powered-off
    machine's disks change no more, but nothing proves its file systems were closed cleanly
    (it may have been destroyed): Crash. Filesystem is only ever recorded when the agent froze
    them; a machine that cannot have that waits with `GuestAgentUnavailable`.
    """
    if agent_answered:
        return Consistency.FILESYSTEM
    if wanted is Consistency.FILESYSTEM:
        why = (
            "the machine is powered off: no guest agent can freeze its file systems"
            if not running
            else "the guest agent did not answer the freeze"
        )
        return Problem(
            c.SNAPSHOT_REASON_AGENT_UNAVAILABLE,
            f"Filesystem consistency was asked and {why}; the snapshot is tried again (ask Auto "
            "or Crash to accept a crash-consistent copy)",
        )
    return Consistency.CRASH


def ready_condition(
    current: object, *, status: str, reason: str, message: str, generation: int | None, now: str
) -> list[dict[str, Any]]:
    """The status' conditions with Ready as given (its transition time kept while unchanged)."""
    desired: Iterable[DesiredCondition] = (
        DesiredCondition(c.SNAPSHOT_CONDITION_READY, status, reason, message),
    )
    return merge_conditions(current, desired, generation=generation, now=now)


def dependents(copy_paths: Iterable[str], volumes: Iterable[tuple[str, str | None]]) -> list[str]:
    """The volumes (name, backing path) that are overlays on one of the snapshot's copies
    (`copy_paths`): clones' disks, and copies of clones taken by other snapshots. Deleting the
    copies would break them, so the snapshot waits until none is left. Sorted, for a message
    that changes only when the set does."""
    copies = {posixpath.normpath(p) for p in copy_paths}
    return sorted(
        name
        for name, backing in volumes
        if backing is not None and posixpath.normpath(backing) in copies
    )
