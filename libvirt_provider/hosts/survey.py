"""What one placement pass finds in the copies (pure): the ledger, what to say or fix on machines
that have a host, and which machines to place.

Every machine with a host is booked in the ledger at the demand it takes there (pending while
its volumes are not created, i.e. until it reports a providerID), and is no longer *assumed*: the
copies show it now. A machine its host refused to admit (`NotAdmitted`, no domain) takes nothing
there and is not booked. Assumed bindings the copies do not show yet are booked too. The ledger is
built only when some machine waits to be placed: it serves decisions only.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from libvirt_provider.hosts.assumed import Assumed
from libvirt_provider.hosts.heartbeat import host_not_ready
from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.hosts.machines import (
    HostRecord,
    host_of,
    host_record,
    key_of,
    not_admitted,
    spread_group,
    unplaced,
)
from libvirt_provider.hosts.placement import HostView, Ledger
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
) -> Survey:
    """`objs` every LibvirtMachine, `views` every host with an inventory, `registered` the name
    of every LibvirtHost; `demand` what a placed machine takes on its host; `answered` whether
    the API server has answered for a heartbeat grace; `now` monotonic, `wall` UTC time."""
    waiting = [obj for obj in objs if unplaced(obj)]
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
        )
        if record is not None or report is not None:
            fixes.append(Fix(obj, record, report))
        if not waiting or not_admitted(obj):
            continue
        status = obj.get("status") or {}
        ledger.put(
            key,
            host,
            demand(obj, by_name.get(host)),
            pending=not status.get("providerID"),
            group=spread_group(obj),
        )
    assumed.book(ledger, now=now)
    oldest_first = sorted(
        waiting, key=lambda o: str((o.get("metadata") or {}).get("creationTimestamp"))
    )
    return Survey(ledger, tuple(fixes), tuple(oldest_first))
