"""A LibvirtRestore's checks and its step machine (pure): what a pass does next, decided from what
it read, so that a pass after a crash, at any point, takes up where the last one stopped.

The steps, each safe to repeat:

1. `HOLD`: record the machine's power state, then write the hold on the LibvirtMachine
   (`machine/hold.py`), guarded by its resourceVersion so that of two restores one wins.
2. `WAIT_HELD`: the machine's own controller powers it off and says `held`.
3. `SWAP`, one disk at a time: delete the disk's volume, make a new overlay on the snapshot's
   copy under the same name, record the disk in `status.restoredDisks`. A disk not recorded is
   done again (deleting and making it again yields the same volume: nothing was written to it,
   the machine being off); a recorded one is skipped.
4. `FINISH`: write `Succeeded` (the phase is final from here), then `RELEASE` the hold; a pass
   that finds a final phase and its own hold still set only releases it. A finished restore is
   never started again, whatever the machine does afterwards.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from generic.conditions import find_condition
from libvirt_provider import constants as c
from libvirt_provider.machine.hold import RestoreHold
from libvirt_provider.snapshot.plan import Problem, SourceDisk
from libvirt_provider.snapshot_api import SnapshotDisk

__all__ = [
    "FINAL_PHASES",
    "Step",
    "Swap",
    "check_snapshot",
    "next_step",
    "plan_swaps",
    "succeeded_condition",
]

FINAL_PHASES = frozenset({c.RESTORE_PHASE_SUCCEEDED, c.RESTORE_PHASE_FAILED})


class Step(enum.Enum):
    NOTHING = "nothing"
    RELEASE = "release"  # a final restore still holding its machine: let it go
    WAIT_OTHER = "wait for another restore"
    WAIT_POWER_OFF = "wait for the user to power the machine off"
    HOLD = "hold the machine off"
    WAIT_HELD = "wait for the machine's controller to power it off"
    SWAP = "replace the disks"
    FINISH = "write Succeeded, then release"


def next_step(
    *,
    phase: str | None,
    hold: RestoreHold | None,
    uid: str,
    running: bool,
    wait_for_user: bool,
    all_swapped: bool,
) -> Step:
    """What the pass does next. `hold` is the machine's, `uid` this restore's."""
    ours = hold is not None and hold.uid == uid
    if phase in FINAL_PHASES:
        return Step.RELEASE if ours else Step.NOTHING
    if hold is not None and not ours:
        return Step.WAIT_OTHER
    if ours:
        assert hold is not None
        if not hold.held or running:
            return Step.WAIT_HELD
        return Step.FINISH if all_swapped else Step.SWAP
    if running and wait_for_user and phase != c.RESTORE_PHASE_RESTORING:
        return Step.WAIT_POWER_OFF
    return Step.HOLD


def check_snapshot(
    snapshot: Mapping[str, Any] | None, *, name: str, namespace: str, machine_uid: str, host: str
) -> Problem | None:
    """Why `snapshot` cannot be restored onto the machine `machine_uid` of `host`, if it cannot.
    A name has no namespace: a snapshot of another namespace can never be named."""
    if snapshot is None:
        return Problem(
            c.RESTORE_REASON_SNAPSHOT_NOT_FOUND,
            f"no {c.SNAPSHOT_KIND} {name!r} in namespace {namespace!r}",
        )
    status = snapshot.get("status") or {}
    if (snapshot.get("metadata") or {}).get("deletionTimestamp"):
        return Problem(c.RESTORE_REASON_SNAPSHOT_NOT_READY, f"snapshot {name!r} is being deleted")
    if not status.get("readyToUse"):
        return Problem(c.RESTORE_REASON_SNAPSHOT_NOT_READY, f"snapshot {name!r} is not ready yet")
    source = status.get("source") or {}
    if source.get("machineUid") != machine_uid:
        return Problem(
            c.RESTORE_REASON_SNAPSHOT_OF_ANOTHER_MACHINE,
            f"snapshot {name!r} was taken of VirtualMachine {source.get('virtualMachine')!r} "
            f"(LibvirtMachine uid {source.get('machineUid')}), not of this machine (uid "
            f"{machine_uid}); a restore rolls a machine back to its own snapshots only (a "
            "snapshot of another machine is cloned with source.snapshot)",
            retry=False,
        )
    if status.get("host") != host:
        return Problem(
            c.RESTORE_REASON_FAILED,
            f"snapshot {name!r} is on host {status.get('host')!r} and the machine on {host!r}",
            retry=False,
        )
    return None


@dataclass(frozen=True)
class Swap:
    """One disk to replace: the machine's volume, made anew as an overlay on the copy."""

    name: str
    pool: str
    volume: str
    copy_pool: str
    copy_volume: str
    size_bytes: int


def plan_swaps(copies: Sequence[SnapshotDisk], disks: Sequence[SourceDisk]) -> list[Swap] | Problem:
    """Each disk the snapshot holds, matched by name with the machine's disk it replaces. The
    machine's disk must be a qcow2 volume of a pool (an overlay is made under its name) and must
    not be writing into a snapshot's pending overlay (a snapshot being taken)."""
    by_name = {d.name: d for d in disks}
    swaps: list[Swap] = []
    for copy in copies:
        disk = by_name.get(copy.name)
        if disk is None:
            return Problem(
                c.RESTORE_REASON_UNSUPPORTED_DISK,
                f"the snapshot holds disk {copy.name!r}, which the machine no longer has "
                f"(it has {sorted(by_name)})",
                retry=False,
            )
        if disk.pending:
            return Problem(
                c.RESTORE_REASON_IN_PROGRESS,
                f"disk {disk.name!r} is being copied by a snapshot; waiting for it",
            )
        if disk.pool is None or disk.volume is None or disk.format != "qcow2":
            return Problem(
                c.RESTORE_REASON_UNSUPPORTED_DISK,
                f"disk {disk.name!r} is a {disk.format} "
                f"{'volume' if disk.volume else 'file'}; only qcow2 volumes are restored in place",
                retry=False,
            )
        swaps.append(
            Swap(
                name=copy.name,
                pool=disk.pool,
                volume=disk.volume,
                copy_pool=copy.pool,
                copy_volume=copy.volume,
                size_bytes=copy.size_bytes,
            )
        )
    return swaps


def succeeded_condition(
    current: object, *, status: str, reason: str, message: str, generation: int | None, now: str
) -> list[dict[str, Any]]:
    """The status' conditions with Succeeded as given (its transition time kept while its
    status is unchanged), the others kept. Not `merge_conditions`: that one owns the VM API's
    condition types only."""
    existing = [i for i in current if isinstance(i, dict)] if isinstance(current, list) else []
    before = find_condition(existing, c.RESTORE_CONDITION_SUCCEEDED)
    since = now
    if before is not None and before.get("status") == status:
        since = str(before.get("lastTransitionTime") or now)
    condition: dict[str, Any] = {
        "type": c.RESTORE_CONDITION_SUCCEEDED,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    others = [dict(i) for i in existing if i.get("type") != c.RESTORE_CONDITION_SUCCEEDED]
    return [*others, condition]
