"""A host's drain, pure: the plan, the next actions and the status text (docs/migration.md,
"Draining a host").

Each pass of the drain's shell (`adapters/host/drain.py`, run by the daemon serving the drained
host) gathers what is true now (the host's `spec.drain` and `status.drain`, the machines bound
to it, the drain's LibvirtMigrations) and asks `drain_pass` what to write and do. Nothing here
remembers anything between passes but the status it returned, so a pass converges from whatever
an earlier pass, a lost write or a restart left: the drain's migrations have names fixed by the
drain, the machine and the attempt (`migration_name`), so creating one twice is harmless.

What it refuses to do: choose a target itself (the caller's `choose`, placement's filters through
`target_choice`), decide the limits (the migrations wait for a slot as any other does), or touch
the cordon (the user's `spec.unschedulable`, required by the CRD while a drain is set).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.host_api import DrainCounts, DrainedMachine, HostDrainStatus

__all__ = [
    "Abort",
    "CreateMigration",
    "DrainEvent",
    "DrainPass",
    "DrainRequest",
    "MachineOnHost",
    "Move",
    "PowerOff",
    "Target",
    "drain_pass",
    "migration_name",
    "progress_message",
]

_MIGRATION_RUNNING = frozenset(
    {
        c.MIGRATION_PHASE_PENDING,
        c.MIGRATION_PHASE_SCHEDULING,
        c.MIGRATION_PHASE_PREPARING,
        c.MIGRATION_PHASE_MIGRATING,
    }
)
_MIGRATION_FAILED = frozenset({c.MIGRATION_PHASE_FAILED, c.MIGRATION_PHASE_CANCELLED})
_DONE = frozenset(
    {
        c.DRAIN_MACHINE_MOVED,
        c.DRAIN_MACHINE_POWERED_OFF,
        c.DRAIN_MACHINE_STOPPED,
        c.DRAIN_MACHINE_GONE,
    }
)
_ACTIVE = frozenset(
    {c.DRAIN_MACHINE_PENDING, c.DRAIN_MACHINE_MIGRATING, c.DRAIN_MACHINE_POWERING_OFF}
)
_NAME_MAX = 253


@dataclass(frozen=True)
class DrainRequest:
    """`spec.drain` as the user wrote it."""

    dry_run: bool = False
    on_cancel: str = c.DRAIN_ON_CANCEL_FINISH


@dataclass(frozen=True)
class MachineOnHost:
    """A LibvirtMachine bound to the drained host, as the shell read it."""

    namespace: str
    name: str
    strategy: str = c.EVICTION_LIVE_MIGRATE
    powered_off: bool = False
    """Nothing runs to move: its status says PoweredOff, or no domain was built for it here."""
    locked_by: str | None = None
    """The LibvirtMigration holding its lock (status.migration), the drain's or another's."""


@dataclass(frozen=True)
class Move:
    """One of the drain's LibvirtMigrations (labelled with the host), as the shell read it."""

    namespace: str
    name: str
    phase: str | None
    reason: str = ""
    message: str = ""
    target: str | None = None


@dataclass(frozen=True)
class Target:
    """Where placement's filters send a machine now (`target_choice.Choice`), or why nowhere."""

    host: str | None
    message: str = ""


@dataclass(frozen=True)
class CreateMigration:
    namespace: str
    name: str
    machine: str


@dataclass(frozen=True)
class PowerOff:
    namespace: str
    machine: str


@dataclass(frozen=True)
class Abort:
    """Delete a running migration of the drain (deleting one cancels it)."""

    namespace: str
    name: str


Action = CreateMigration | PowerOff | Abort


@dataclass(frozen=True)
class DrainEvent:
    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class DrainPass:
    """What one pass writes and does. `status` None: `status.drain` is removed; `condition`
    None: the Drained condition is removed (else its status, reason and message)."""

    status: dict[str, Any] | None
    condition: tuple[str, str, str] | None
    actions: list[Action] = field(default_factory=list)
    events: list[DrainEvent] = field(default_factory=list)


def migration_name(drain_id: int, attempt: int, machine: str) -> str:
    """The drain's migration of `machine` at `attempt` (1, 2, ...):
    `drain-<id>-<attempt>-<machine>`, shortened with a hash of the whole when it would not be a
    valid name."""
    name = f"{c.DRAIN_MIGRATION_PREFIX}{drain_id}-{attempt}-{machine}"
    if len(name) <= _NAME_MAX:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: _NAME_MAX - 11].rstrip('.-')}-{digest}"


def drain_pass(
    *,
    host: str,
    request: DrainRequest | None,
    previous: Mapping[str, Any] | None,
    machines: Sequence[MachineOnHost],
    moves: Sequence[Move],
    choose: Callable[[MachineOnHost], Target],
    generation: int,
    now: str,
) -> DrainPass:
    """The drain's next step for `host`. `previous` is `status.drain` as the object shows it,
    `generation` the host's metadata.generation (the new drain's id), `now` a timestamp."""
    before = HostDrainStatus.model_validate(previous) if previous else None
    if request is None:
        if before is None:
            return DrainPass(status=None, condition=None)
        return _cancelled(host, before, moves)
    fresh = before is None
    drain_id = generation if before is None else before.id
    earlier = {(m.namespace, m.name): m for m in (before.machines if before else [])}
    by_name = {(m.namespace, m.name): m for m in moves}
    on_host = {(m.namespace, m.name): m for m in machines}
    planning = fresh or request.dry_run
    actions: list[Action] = []
    events: list[DrainEvent] = []
    entries: list[DrainedMachine] = []
    for key in sorted(set(on_host) | set(earlier)):
        machine = on_host.get(key)
        entry = earlier.get(key)
        if machine is None:
            assert entry is not None
            entries.append(_left_host(entry, by_name, drain_id))
            continue
        planned, acts, evs = _machine_step(
            host,
            machine,
            entry,
            by_name=by_name,
            choose=choose,
            drain_id=drain_id,
            act=not planning,
        )
        entries.append(planned)
        actions.extend(acts)
        events.extend(evs)
    counts = _counts(entries)
    if request.dry_run:
        phase = c.DRAIN_PHASE_PLANNED
    elif fresh:
        phase = c.DRAIN_PHASE_PLANNING
    elif (
        counts.pending
        or counts.migrating
        or any(e.state == c.DRAIN_MACHINE_POWERING_OFF for e in entries)
    ):
        phase = c.DRAIN_PHASE_DRAINING
    elif counts.blocked:
        phase = c.DRAIN_PHASE_BLOCKED
    else:
        phase = c.DRAIN_PHASE_DRAINED
    message = progress_message(entries, phase=phase)
    status = HostDrainStatus(
        phase=phase,
        id=drain_id,
        dry_run=request.dry_run,
        on_cancel=request.on_cancel,
        start_time=before.start_time if before is not None else now,
        message=message,
        counts=counts,
        machines=entries,
    )
    condition = _condition(phase, message)
    if before is None or before.phase != phase:
        events.append(DrainEvent(condition[1], f"drain of host {host}: {message}", _warns(phase)))
    return DrainPass(
        status=status.model_dump(by_alias=True, exclude_none=True, mode="json"),
        condition=condition,
        actions=actions,
        events=events,
    )


def _machine_step(
    host: str,
    machine: MachineOnHost,
    entry: DrainedMachine | None,
    *,
    by_name: Mapping[tuple[str, str], Move],
    choose: Callable[[MachineOnHost], Target],
    drain_id: int,
    act: bool,
) -> tuple[DrainedMachine, list[Action], list[DrainEvent]]:
    """One machine still bound to the host: its entry, and what to do for it now."""
    ref = f"{machine.namespace}/{machine.name}"
    attempts = entry.attempts if entry is not None else 0
    base = DrainedMachine(
        namespace=machine.namespace,
        name=machine.name,
        strategy=machine.strategy,
        state=c.DRAIN_MACHINE_PENDING,
        attempts=attempts,
    )
    if machine.strategy == c.EVICTION_NONE:
        blocked = base.model_copy(
            update={
                "state": c.DRAIN_MACHINE_BLOCKED,
                "reason": "evictionStrategy None: it stays, and the host is not drained",
            }
        )
        return blocked, [], _blocked_event(entry, blocked, ref)
    if machine.strategy == c.EVICTION_POWER_OFF:
        if machine.powered_off:
            return base.model_copy(update={"state": c.DRAIN_MACHINE_POWERED_OFF}), [], []
        powering = base.model_copy(update={"state": c.DRAIN_MACHINE_POWERING_OFF})
        if not act:
            return base.model_copy(update={"reason": "to be powered off (PowerOff)"}), [], []
        events = []
        if entry is None or entry.state != c.DRAIN_MACHINE_POWERING_OFF:
            events.append(
                DrainEvent(
                    c.EVENT_DRAIN_POWER_OFF, f"powering {ref} off (evictionStrategy PowerOff)"
                )
            )
        return powering, [PowerOff(machine.namespace, machine.name)], events
    # LiveMigrate: the migrations of attempts done so far failed; the next one is current.
    if attempts >= c.DRAIN_MAX_ATTEMPTS and entry is not None:
        # Given up on a pass before: the entry's count holds it (its migrations may be gone).
        kept = base.model_copy(
            update={
                "state": c.DRAIN_MACHINE_BLOCKED,
                "migration": entry.migration,
                "target": entry.target,
                "reason": entry.reason,
            }
        )
        return kept, [], _blocked_event(entry, kept, ref)
    while True:
        current = by_name.get(
            (machine.namespace, migration_name(drain_id, attempts + 1, machine.name))
        )
        if current is None or current.phase not in _MIGRATION_FAILED:
            break
        attempts += 1
        if attempts >= c.DRAIN_MAX_ATTEMPTS:
            blocked = base.model_copy(
                update={
                    "state": c.DRAIN_MACHINE_BLOCKED,
                    "attempts": attempts,
                    "migration": current.name,
                    "reason": f"{attempts} migrations failed, the last {current.reason}: "
                    f"{current.message}"[:1024],
                }
            )
            return blocked, [], _blocked_event(entry, blocked, ref)
    base = base.model_copy(update={"attempts": attempts})
    name = migration_name(drain_id, attempts + 1, machine.name)
    if current is not None:
        if current.phase == c.MIGRATION_PHASE_SUCCEEDED:
            # Handed over, the binding not yet seen moved.
            return (
                base.model_copy(
                    update={
                        "state": c.DRAIN_MACHINE_MOVED,
                        "migration": name,
                        "target": current.target,
                    }
                ),
                [],
                [],
            )
        return (
            base.model_copy(
                update={
                    "state": c.DRAIN_MACHINE_MIGRATING,
                    "migration": name,
                    "target": current.target or (entry.target if entry else None),
                    "reason": current.message[:1024] if current.message else None,
                }
            ),
            [],
            [],
        )
    if machine.powered_off:
        return (
            base.model_copy(
                update={"state": c.DRAIN_MACHINE_STOPPED, "reason": "not running: left on the host"}
            ),
            [],
            [],
        )
    if machine.locked_by is not None:
        return (
            base.model_copy(
                update={
                    "reason": f"migration {machine.locked_by} moves it already: the drain "
                    "waits for its end"
                }
            ),
            [],
            [],
        )
    choice = choose(machine)
    if choice.host is None:
        blocked = base.model_copy(
            update={"state": c.DRAIN_MACHINE_BLOCKED, "reason": choice.message[:1024]}
        )
        return blocked, [], _blocked_event(entry, blocked, ref)
    planned = base.model_copy(update={"target": choice.host})
    if not act:
        return planned, [], []
    event = (
        DrainEvent(
            c.EVENT_DRAIN_RETRY,
            f"migrating {ref} again ({name}, attempt {attempts + 1} of {c.DRAIN_MAX_ATTEMPTS})",
            warning=True,
        )
        if attempts
        else DrainEvent(
            c.EVENT_DRAIN_MIGRATION_CREATED,
            f"migrating {ref} off host {host} ({name}, planned target {choice.host})",
        )
    )
    migrating = planned.model_copy(update={"state": c.DRAIN_MACHINE_MIGRATING, "migration": name})
    return migrating, [CreateMigration(machine.namespace, name, machine.name)], [event]


def _left_host(
    entry: DrainedMachine, by_name: Mapping[tuple[str, str], Move], drain_id: int
) -> DrainedMachine:
    """A planned machine no longer bound to the host: moved by the drain, or gone otherwise.

    The source binds the machine to the target before the target records the end (`Succeeded`):
    in between, the machine is already off the host and its migration still runs."""
    if entry.state == c.DRAIN_MACHINE_MOVED:
        return entry
    name = migration_name(drain_id, entry.attempts + 1, entry.name)
    move = by_name.get((entry.namespace, name))
    if move is not None and move.phase == c.MIGRATION_PHASE_SUCCEEDED:
        return entry.model_copy(
            update={
                "state": c.DRAIN_MACHINE_MOVED,
                "migration": name,
                "target": move.target or entry.target,
                "reason": None,
            }
        )
    if move is not None and move.phase in _MIGRATION_RUNNING:
        return entry.model_copy(
            update={
                "state": c.DRAIN_MACHINE_MIGRATING,
                "migration": name,
                "target": move.target or entry.target,
            }
        )
    return entry.model_copy(
        update={
            "state": c.DRAIN_MACHINE_GONE,
            "reason": "no longer on the host (deleted, or moved by someone else)",
        }
    )


def _blocked_event(
    entry: DrainedMachine | None, blocked: DrainedMachine, ref: str
) -> list[DrainEvent]:
    if entry is not None and entry.state == blocked.state and entry.reason == blocked.reason:
        return []
    return [
        DrainEvent(c.EVENT_DRAIN_MACHINE_BLOCKED, f"{ref} blocks the drain: {blocked.reason}", True)
    ]


def _cancelled(host: str, before: HostDrainStatus, moves: Sequence[Move]) -> DrainPass:
    """spec.drain was cleared: the status goes; running migrations finish or are aborted."""
    if before.phase in (c.DRAIN_PHASE_DRAINED, c.DRAIN_PHASE_PLANNED):
        message = f"the drain of host {host} was cleared ({before.phase})"
        if before.phase == c.DRAIN_PHASE_DRAINED:
            message += "; it stays cordoned until spec.unschedulable is cleared"
        return DrainPass(
            status=None, condition=None, events=[DrainEvent(c.EVENT_DRAIN_CLEARED, message)]
        )
    mine = f"{c.DRAIN_MIGRATION_PREFIX}{before.id}-"
    running = sorted(
        (m for m in moves if m.phase in _MIGRATION_RUNNING and m.name.startswith(mine)),
        key=lambda m: (m.namespace, m.name),
    )
    names = ", ".join(f"{m.namespace}/{m.name}" for m in running)
    actions: list[Action] = []
    if before.on_cancel == c.DRAIN_ON_CANCEL_ABORT:
        actions = [Abort(m.namespace, m.name) for m in running]
        fate = f"its running migrations are aborted: {names}" if running else "none was running"
    else:
        fate = f"its running migrations finish: {names}" if running else "none was running"
    message = (
        f"the drain of host {host} was cancelled ({before.message}); {fate}; the host stays "
        "cordoned until spec.unschedulable is cleared"
    )
    return DrainPass(
        status=None,
        condition=None,
        actions=actions,
        events=[DrainEvent(c.EVENT_DRAIN_CANCELLED, message, warning=True)],
    )


def _counts(entries: Sequence[DrainedMachine]) -> DrainCounts:
    def count(*states: str) -> int:
        return sum(1 for e in entries if e.state in states)

    return DrainCounts(
        total=len(entries),
        moved=count(c.DRAIN_MACHINE_MOVED),
        migrating=count(c.DRAIN_MACHINE_MIGRATING),
        pending=count(c.DRAIN_MACHINE_PENDING),
        powered_off=count(c.DRAIN_MACHINE_POWERED_OFF, c.DRAIN_MACHINE_POWERING_OFF),
        left=count(c.DRAIN_MACHINE_STOPPED, c.DRAIN_MACHINE_GONE),
        blocked=count(c.DRAIN_MACHINE_BLOCKED),
    )


def progress_message(entries: Sequence[DrainedMachine], *, phase: str) -> str:
    """'7 of 10 moved, 2 migrating, 1 blocked: ns/m (reason)', and the other figures that are
    not zero."""
    counts = _counts(entries)
    if phase in (c.DRAIN_PHASE_PLANNING, c.DRAIN_PHASE_PLANNED):
        going = sum(1 for e in entries if e.target and e.state not in _DONE)
        parts = [f"plan: {going} of {counts.total} to migrate"]
    else:
        parts = [f"{counts.moved} of {counts.total} moved"]
        if counts.migrating:
            parts.append(f"{counts.migrating} migrating")
        if counts.pending:
            parts.append(f"{counts.pending} pending")
    if counts.powered_off:
        parts.append(f"{counts.powered_off} powered off")
    if counts.left:
        parts.append(f"{counts.left} left (not running or gone)")
    text = ", ".join(parts)
    blocked = [e for e in entries if e.state == c.DRAIN_MACHINE_BLOCKED]
    if blocked:
        listed = "; ".join(f"{e.namespace}/{e.name} ({e.reason})" for e in blocked)
        text += f", {len(blocked)} blocked: {listed}"
    return text[:1024]


def _condition(phase: str, message: str) -> tuple[str, str, str]:
    reason = {
        c.DRAIN_PHASE_PLANNING: c.DRAIN_REASON_PLANNING,
        c.DRAIN_PHASE_PLANNED: c.DRAIN_REASON_DRY_RUN,
        c.DRAIN_PHASE_DRAINING: c.DRAIN_REASON_DRAINING,
        c.DRAIN_PHASE_BLOCKED: c.DRAIN_REASON_BLOCKED,
        c.DRAIN_PHASE_DRAINED: c.DRAIN_REASON_DRAINED,
    }[phase]
    status = "True" if phase == c.DRAIN_PHASE_DRAINED else "False"
    return status, reason, message


def _warns(phase: str) -> bool:
    return phase == c.DRAIN_PHASE_BLOCKED
