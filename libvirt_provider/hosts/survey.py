"""What one placement pass finds in the copies (pure): the ledger, what to say or fix on machines
that have a host, and which machines to place.

Every machine with a host is booked in the ledger at the demand it takes there (pending while
its volumes are not created, i.e. until it reports a providerID), and is no longer *assumed*: the
copies show it now. A machine its host refused to admit (`NotAdmitted`, no domain) takes nothing
there and is not booked. Assumed bindings the copies do not show yet are booked too. The ledger is
built only when some machine waits to be placed or a preempted one waits to start again: it
serves decisions only.

A preempted spot machine (`status.preemption`, or preempted by this placer and not seen back yet)
is not booked: the room it held is what it was preempted for. It is listed, to start again when
its host has room (`preemption.restarts`); one this placer just started again is booked.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from generic.formats import parse_time
from libvirt_provider.constants import HEARTBEAT_GRACE_SECONDS
from libvirt_provider.hosts.assumed import Assumed
from libvirt_provider.hosts.heartbeat import host_not_ready
from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.hosts.machines import (
    HostRecord,
    host_of,
    host_record,
    key_of,
    not_admitted,
    preempted_at,
    spread_group,
    unplaced,
)
from libvirt_provider.hosts.placement import HostView, Ledger
from libvirt_provider.hosts.preemption import Preempted
from libvirt_provider.hosts.report import Report

__all__ = ["Fix", "Survey", "survey"]

Obj = dict[str, Any]


@dataclass(frozen=True)
class Fix:
    """A machine with a host that the placer writes to: what makes its spec.host and label agree
    (`record`), and what to say when its host stopped its heartbeat (or has no LibvirtHost)."""

    obj: Obj
    record: HostRecord | None
    stranded: Report | None


@dataclass(frozen=True)
class Survey:
    ledger: Ledger
    # In the order of the machines.
    fixes: tuple[Fix, ...]
    # Machines to place, oldest first (some may be assumed by the time their turn comes).
    unplaced: tuple[Obj, ...]
    # Preempted machines waiting to start again on their host.
    preempted: tuple[Preempted, ...] = ()
    # Machines bound to a host that has not admitted them (`since` their creation), listed
    # while some machine is preempted: they go before a preempted machine starts again.
    refused: tuple[Preempted, ...] = ()


def survey(
    objs: Sequence[Obj],
    views: Sequence[HostView],
    registered: AbstractSet[str],
    *,
    assumed: Assumed,
    demand: Callable[[Obj, HostView | None], Demand],
    answered: bool,
    now: float,
    wall: dt.datetime,
    preempting: Mapping[str, str] | None = None,
    restarting: AbstractSet[str] = frozenset(),
    grace: float = HEARTBEAT_GRACE_SECONDS,
) -> Survey:
    """`objs` every LibvirtMachine, `views` every host with an inventory, `registered` the name
    of every LibvirtHost; `demand` what a placed machine takes on its host; `answered` whether
    the API server has answered for a heartbeat grace; `now` monotonic, `wall` UTC time;
    `preempting` the machines this placer preempted (when) and `restarting` those it started
    again, whichever the copies do not show yet; `grace` the heartbeat grace."""
    preempting = preempting or {}

    def since(obj: Obj) -> str | None:
        key = key_of(obj)
        if key in restarting or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return None
        return preempting.get(key) or preempted_at(obj)

    waiting = [obj for obj in objs if unplaced(obj)]
    lined = [obj for obj in objs if host_of(obj) is not None and since(obj) is not None]
    preempted: list[Preempted] = []
    refused: list[Preempted] = []
    by_name = {view.name: view for view in views}
    ledger = Ledger()
    fixes: list[Fix] = []
    for obj in objs:
        host = host_of(obj)
        if host is None:
            continue
        key = key_of(obj)
        assumed.forget(key)
        record = host_record(obj)
        report = host_not_ready(
            host,
            by_name.get(host),
            registered=host in registered,
            created=(obj.get("metadata") or {}).get("creationTimestamp"),
            now=wall,
            answered=answered,
            conditions=(obj.get("status") or {}).get("conditions"),
            grace=grace,
        )
        if record is not None or report is not None:
            fixes.append(Fix(obj, record, report))
        if not (waiting or lined):
            continue
        if not_admitted(obj):
            if lined and not (obj.get("metadata") or {}).get("deletionTimestamp"):
                born = str((obj.get("metadata") or {}).get("creationTimestamp") or "")
                refused.append(Preempted(key, host, demand(obj, by_name.get(host)), born))
            continue
        status = obj.get("status") or {}
        takes = demand(obj, by_name.get(host))
        line = since(obj)
        if line is not None:
            preempted.append(Preempted(key, host, takes, line))
            continue
        created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
        ledger.put(
            key,
            host,
            takes,
            pending=not status.get("providerID"),
            group=spread_group(obj),
            created=created.timestamp() if created is not None else 0.0,
        )
    assumed.book(ledger, now=now)
    oldest_first = sorted(
        waiting, key=lambda o: str((o.get("metadata") or {}).get("creationTimestamp"))
    )
    return Survey(ledger, tuple(fixes), tuple(oldest_first), tuple(preempted), tuple(refused))
