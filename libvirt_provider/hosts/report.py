"""What placement says on a machine it does not place (pure).

A machine that cannot be placed gets `InfrastructureReady` and `UpToDate` with one reason and
message (its VirtualMachine copies them) and a Warning Event, once per distinct message. A
machine whose host stopped its heartbeat gets `HostNotReady` (`hosts/heartbeat.py` decides when).
This module says which reason and message, which conditions patch, and when an Event is news; the
placer writes them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from generic.conditions import DesiredCondition, merge_conditions
from generic.constants import (
    CONDITION_INFRASTRUCTURE_READY,
    CONDITION_UP_TO_DATE,
    REASON_WAITING_FOR_CAPACITY,
)
from generic.formats import merge_patch
from libvirt_provider.constants import EVENT_PLACED, EVENT_SPREAD_NOT_HONOURED
from libvirt_provider.hosts.placement import Decision
from libvirt_provider.resolve.context import Problem

__all__ = [
    "STARTUP_GRACE_SECONDS",
    "Event",
    "Report",
    "Reported",
    "conditions_patch",
    "placed_events",
    "startup_grace",
    "unplaced_report",
]

STARTUP_GRACE_SECONDS = 15.0
"""How long after a term begins a machine that fits nowhere is only retried, not reported (with
the default heartbeat grace)."""


def startup_grace(heartbeat_interval: float) -> float:
    """`STARTUP_GRACE_SECONDS` for hosts that renew every `heartbeat_interval` (10 s by default):
    a host whose daemon starts with the placer has written its LibvirtHost and a heartbeat well
    within one and a half of its intervals."""
    return 1.5 * heartbeat_interval


@dataclass(frozen=True)
class Report:
    """A condition reason and its message."""

    reason: str
    message: str


def unplaced_report(
    problems: Sequence[Problem],
    decision: Decision,
    *,
    term_age: float,
    grace: float = STARTUP_GRACE_SECONDS,
) -> Report | None:
    """What to say on a machine no host took: what is wrong with its spec (the same on every host),
    else why each host was passed over; nothing in the first seconds of a term, when hosts are
    still registering as their daemons start with the placer (that is not news for the user):
    `grace`, `startup_grace`)."""
    if problems:
        return Report(problems[0].reason, "; ".join(str(p) for p in problems))
    if term_age >= grace:
        return Report(REASON_WAITING_FOR_CAPACITY, decision.message)
    return None


def conditions_patch(
    status: Mapping[str, Any],
    generation: object,
    condition_status: str,
    report: Report,
    *,
    now: str,
) -> dict[str, Any] | None:
    """The merge patch that sets InfrastructureReady and UpToDate to `condition_status` with the
    report's reason and message; None when the status already says so."""
    desired = dict(status)
    desired["conditions"] = merge_conditions(
        status.get("conditions"),
        [
            DesiredCondition(
                CONDITION_INFRASTRUCTURE_READY, condition_status, report.reason, report.message
            ),
            DesiredCondition(CONDITION_UP_TO_DATE, condition_status, report.reason, report.message),
        ],
        generation=generation if isinstance(generation, int) else None,
        now=now,
    )
    return merge_patch(status, desired)


class Reported:
    """The message last reported on each waiting machine: a Warning Event is posted once per
    distinct message, not on every pass."""

    def __init__(self) -> None:
        self._messages: dict[str, str] = {}

    def is_news(self, key: str, message: str) -> bool:
        """True (and remembered) when `message` is not what `key` was last told."""
        if self._messages.get(key) == message:
            return False
        self._messages[key] = message
        return True

    def forget(self, key: str) -> None:
        """The machine was placed: a later wait is news again."""
        self._messages.pop(key, None)

    def keep_only(self, live: Collection[str]) -> None:
        """Forget the machines that no longer exist."""
        for key in [k for k in self._messages if k not in live]:
            del self._messages[key]


@dataclass(frozen=True)
class Event:
    reason: str
    message: str
    warning: bool = False


def placed_events(
    host: str, *, spread_honoured: bool, group: tuple[str, str] | None
) -> tuple[Event, ...]:
    """The Events of a binding: `Placed`, and a Warning `SpreadNotHonoured` when every host (or
    zone) that fits already had a member of the machine's spread group."""
    placed = Event(EVENT_PLACED, f"placed on host {host}")
    if spread_honoured:
        return (placed,)
    beside = Event(
        EVENT_SPREAD_NOT_HONOURED,
        f"spread group {group[1] if group else ''!r} already has a machine on "
        f"every host (or zone) that fits; placed on {host} beside one",
        warning=True,
    )
    return (placed, beside)
