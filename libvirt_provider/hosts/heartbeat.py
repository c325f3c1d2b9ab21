"""A host's heartbeat as the placing daemon judges it (pure).

Each daemon renews a Lease every `HEARTBEAT_SECONDS`. A heartbeat renewed within the grace
(`--heartbeat-grace`, `HEARTBEAT_GRACE_SECONDS` by default; every daemon of a cluster is given the
same) is fresh; placement puts nothing new on a host whose heartbeat is not.

Declaring a host's machines stranded (`HostNotReady`) waits longer: only once the placer has had
the API server answer it for a heartbeat grace without a break. After a term begins, and after
an API server outage (which also ends the term), no host could renew meanwhile, and its stale
heartbeat is no news about the host. Without this rule every machine of every host got
`HostNotReady` the moment an API server came back from an outage longer than the grace.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet

from generic.conditions import find_condition
from generic.constants import CONDITION_INFRASTRUCTURE_READY
from generic.formats import parse_time
from libvirt_provider.constants import (
    HEARTBEAT_GRACE_SECONDS,
    HEARTBEAT_SECONDS,
    HOST_LABEL,
    REASON_HOST_NOT_READY,
)
from libvirt_provider.hosts.placement import HostView
from libvirt_provider.hosts.report import Report

__all__ = [
    "HEARTBEATS_FRESH_SECONDS",
    "Answered",
    "fresh",
    "heartbeat_interval",
    "host_not_ready",
    "list_again",
    "renewals",
    "takeover_refused",
]

HEARTBEATS_FRESH_SECONDS = 3.0
"""How long one LIST of the heartbeat Leases serves passes (heartbeats are 10 s apart and judged
against 40 s: a few seconds of age change nothing)."""

_STAYS = "the machine's state is unknown; it stays on its host and is not recreated elsewhere"


def heartbeat_interval(grace: float) -> float:
    """How often a host renews its heartbeat: a quarter of the grace, so three renewals in a row
    may fail before placement counts the host out, and at most every `HEARTBEAT_SECONDS`."""
    return min(HEARTBEAT_SECONDS, grace / 4)


def fresh(
    renewed: dt.datetime | None, now: dt.datetime, grace: float = HEARTBEAT_GRACE_SECONDS
) -> bool:
    """A heartbeat renewed at `renewed` still vouches for its host at `now`."""
    return renewed is not None and (now - renewed).total_seconds() <= grace


def takeover_refused(
    host: str,
    holder: object,
    renewed: dt.datetime | None,
    duration: object,
    now: dt.datetime,
    *,
    grace: float = HEARTBEAT_GRACE_SECONDS,
) -> str | None:
    """Why this host's daemon must not take its heartbeat Lease, or None when it may renew it.

    The Lease is the daemon's while it holds it, nobody holds it, or its holder stopped renewing
    it (its duration, or the heartbeat grace when it names none, has passed since `renewed`).
    A fresh Lease held by anyone else (a remote host's claim, held by a remote-mode replica, or
    another daemon started with the same `--host`) is theirs: taking it over would let a node
    named like a remote host steal that host's heartbeat, and placement's view of it.
    """
    if not holder or holder == host:
        return None
    held_for = duration if isinstance(duration, int) and duration > 0 else grace
    if renewed is None or (now - renewed).total_seconds() > held_for:
        return None
    return (
        f"the heartbeat Lease of host {host} is held by {holder}, renewed "
        f"{max(0, int((now - renewed).total_seconds()))} s ago (a remote host's claim, or another "
        f"daemon started with --host {host}): this daemon does not take it over; give it "
        "another --host (or node name)"
    )


def list_again(
    listed_at: float | None, listed: AbstractSet[str], hosts: AbstractSet[str], now: float
) -> bool:
    """Whether the heartbeats listed at `listed_at` (for `listed` hosts) must be listed again for
    `hosts`: once they are a few seconds old, or when a host has appeared since (its first
    heartbeat is likely there now)."""
    return listed_at is None or now - listed_at >= HEARTBEATS_FRESH_SECONDS or not hosts <= listed


def renewals(leases: Iterable[tuple[Mapping[str, str] | None, object]]) -> dict[str, dt.datetime]:
    """The last renewal of each host's heartbeat, from its Leases' (labels, renewTime): a Lease
    names its host by the host label; one without it, or never renewed, says nothing."""
    beats: dict[str, dt.datetime] = {}
    for labels, renewed in leases:
        host = (labels or {}).get(HOST_LABEL)
        if host and isinstance(renewed, dt.datetime):
            beats[host] = renewed
    return beats


class Answered:
    """Since when (monotonic seconds) the API server has answered the placer without a break."""

    def __init__(self, since: float, grace: float = HEARTBEAT_GRACE_SECONDS) -> None:
        self.since = since
        self.grace = grace

    def broken(self, at: float) -> None:
        """A term began, or the API server failed to answer a pass: count again from `at`."""
        self.since = at

    def for_a_grace(self, now: float) -> bool:
        """Long enough that a stale heartbeat is news about its host, not about the API server."""
        return now - self.since >= self.grace


def host_not_ready(
    host: str,
    view: HostView | None,
    *,
    registered: bool,
    created: object,
    now: dt.datetime,
    answered: bool,
    conditions: object,
    grace: float = HEARTBEAT_GRACE_SECONDS,
) -> Report | None:
    """What to report (`HostNotReady`) on a machine placed on `host`, or None.

    `view` is the host as placement sees it (None while its LibvirtHost has no inventory, or
    there is none: `registered` says which), `created` the machine's creationTimestamp, `answered`
    whether the API server has answered for a grace (`Answered.for_a_grace`), `conditions` the
    machine's current ones: a machine that already says `HostNotReady` is not told again;
    `grace` the heartbeat grace.
    """
    if view is not None:
        if view.ready or not view.heartbeat_lost:
            return None
        if not answered:
            # The host may not have been able to renew either. Placement still avoids it (it
            # is not ready), but its machines are not declared stranded yet.
            return None
        message = f"host {host} has not renewed its heartbeat for over {grace:g} s: {_STAYS}"
    elif registered:
        return None  # its daemon has not written a first inventory yet
    else:
        # A host's daemon creates its LibvirtHost as it starts: give a new machine the time.
        since = parse_time(created)
        if since is None or (now - since).total_seconds() <= grace:
            return None
        message = (
            f"no LibvirtHost named {host} exists (its daemon never ran, or the host was "
            f"removed): {_STAYS}"
        )
    ready = find_condition(conditions, CONDITION_INFRASTRUCTURE_READY)
    if ready is not None and ready.get("reason") == REASON_HOST_NOT_READY:
        return None
    return Report(REASON_HOST_NOT_READY, message)
