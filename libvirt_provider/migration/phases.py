"""Which daemon does what next for a migration: the phase state machine, pure.

Each host's daemon owns its own host's domains and volumes, so a migration is a relay between
two daemons that never talk to each other, only through the migration's status:

- the source's daemon (the machine's host) accepts or refuses it (`Pending` -> `Preparing`, or
  `Failed` with the refusal) and locks the machine (`status.migration` on the LibvirtMachine);
- the target's daemon prepares the machine's volumes (`preparedVolumes`), or fails it;
- the source's daemon runs the copy (`Migrating`), deletes its own volumes of the machine, moves
  the binding (spec.host, the host label) and sets `handedOver`;
- the target's daemon records what libvirt measured and ends it (`Succeeded`), unlocking the
  machine; after a failure or a cancel it deletes what it prepared (`targetCleaned`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.driver.types import DomainState
from libvirt_provider.migration_api import MigrationPhase

__all__ = [
    "Facts",
    "Leftover",
    "Role",
    "Step",
    "leftover",
    "next_step",
    "role_of",
    "succeeded_condition",
    "terminal",
]

_TERMINAL = frozenset({MigrationPhase.SUCCEEDED, MigrationPhase.FAILED, MigrationPhase.CANCELLED})


class Role(enum.StrEnum):
    SOURCE = "source"
    TARGET = "target"
    NONE = "none"


class Step(enum.StrEnum):
    ACCEPT = "accept"
    """Source: check the refusals; lock the machine and hand over to the target, or fail."""
    PREPARE = "prepare"
    """Target: make the machine's volumes, report them."""
    MIGRATE = "migrate"
    """Source: run the copy (or find it done), then hand the machine over."""
    FINISH = "finish"
    """Target: record libvirt's figures of the finished job, Succeeded, unlock the machine."""
    CANCEL = "cancel"
    """Source: abort a running job, Cancelled, unlock the machine (deletion of a live one)."""
    CLEAN_TARGET = "clean-target"
    """Target: delete the volumes it prepared for a migration that did not succeed."""
    RELEASE = "release"
    """Source: drop the finalizer of a deleted migration that has nothing left anywhere."""
    AWAIT_TARGET = "await-target"
    """Source: the target prepares; look now and then whether it still serves (a target that
    stopped before preparing would keep the migration Preparing for ever)."""
    AWAIT_CLEANUP = "await-cleanup"
    """Source: a deleted migration waits for its target to delete what it prepared. The target's
    status write wakes it; the target's LibvirtHost being deleted (the host is lost for good)
    wakes nothing, so look again now and then."""
    WAIT = "wait"
    """Nothing for this host now: the other daemon's step, or the end."""


def terminal(phase: MigrationPhase | None) -> bool:
    return phase in _TERMINAL


def role_of(host: str, *, machine_host: str | None, source: str | None, target: str | None) -> Role:
    """This host's part in the migration: the source is the host recorded when it was accepted
    (before that, the machine's host); the target is the one recorded."""
    if host == (source or machine_host):
        return Role.SOURCE
    if target is not None and host == target:
        return Role.TARGET
    return Role.NONE


@dataclass(frozen=True)
class Facts:
    """What the status says, as the state machine needs it."""

    phase: MigrationPhase | None
    prepared: bool = False
    handed_over: bool = False
    target_cleaned: bool = False
    deleting: bool = False
    # The target's LibvirtHost is gone (an admin deleted it: the host is lost for good), so no
    # daemon will ever clean what it prepared.
    target_gone: bool = False


def next_step(role: Role, facts: Facts) -> Step:
    phase = facts.phase or MigrationPhase.PENDING
    if role is Role.NONE:
        return Step.WAIT
    failed = phase in (MigrationPhase.FAILED, MigrationPhase.CANCELLED)
    leftovers = failed and facts.prepared and not facts.target_cleaned
    if facts.deleting and not terminal(phase):
        # A deletion cancels what has not been handed over yet; once handed over, the target
        # only has the result to record.
        if facts.handed_over:
            return Step.FINISH if role is Role.TARGET else Step.WAIT
        return Step.CANCEL if role is Role.SOURCE else Step.WAIT
    if role is Role.TARGET:
        if leftovers:
            return Step.CLEAN_TARGET
        if phase is MigrationPhase.PREPARING and not facts.prepared:
            return Step.PREPARE
        if phase is MigrationPhase.MIGRATING and facts.handed_over:
            return Step.FINISH
        return Step.WAIT
    # The source.
    if phase in (MigrationPhase.PENDING, MigrationPhase.SCHEDULING):
        return Step.ACCEPT
    if phase is MigrationPhase.PREPARING:
        return Step.MIGRATE if facts.prepared else Step.AWAIT_TARGET
    if phase is MigrationPhase.MIGRATING and not facts.handed_over:
        return Step.MIGRATE
    if facts.deleting and terminal(phase):
        return Step.RELEASE if not leftovers or facts.target_gone else Step.AWAIT_CLEANUP
    return Step.WAIT


class Leftover(enum.StrEnum):
    """What the target does with a domain of the machine it finds after a migration that did
    not succeed."""

    NONE = "none"
    """No domain: delete the prepared volumes."""
    KEEP = "keep"
    """It runs: libvirt finished the job as it was failed; the volumes are its disks."""
    REMOVE = "remove"
    """The unfinished incoming copy (paused, or stopped): remove it, then the volumes."""


def leftover(state: DomainState | None) -> Leftover:
    """An incoming domain runs only once libvirt finished the copy; before that qemu holds it
    paused. A migration whose source's libvirtd failed the job (the target's libvirtd killed or
    unreachable meanwhile) can leave that paused domain behind until the target's libvirtd
    notices, and it must not keep the volumes alive."""
    if state is None:
        return Leftover.NONE
    if state is DomainState.RUNNING:
        return Leftover.KEEP
    return Leftover.REMOVE


def succeeded_condition(
    current: object, *, status: str, reason: str, message: str, generation: int | None, now: str
) -> list[dict[str, Any]]:
    """The status' conditions with Succeeded as given (others kept; its transition time kept
    while its status is unchanged)."""
    existing = current if isinstance(current, list) else []
    kept = [
        dict(item)
        for item in existing
        if isinstance(item, dict) and item.get("type") != c.MIGRATION_CONDITION_SUCCEEDED
    ]
    before = next(
        (
            item
            for item in existing
            if isinstance(item, dict) and item.get("type") == c.MIGRATION_CONDITION_SUCCEEDED
        ),
        None,
    )
    since = now
    if before is not None and before.get("status") == status:
        since = str(before.get("lastTransitionTime") or now)
    condition: dict[str, Any] = {
        "type": c.MIGRATION_CONDITION_SUCCEEDED,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return [*kept, condition]
