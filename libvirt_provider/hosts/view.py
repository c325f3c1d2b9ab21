"""A LibvirtHost and its heartbeat, reduced to what placement compares (pure)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from generic.conditions import find_condition
from libvirt_provider.constants import HEARTBEAT_GRACE_SECONDS, HOST_CONDITION_READY
from libvirt_provider.host_api import LibvirtHostSpec
from libvirt_provider.hosts.heartbeat import fresh
from libvirt_provider.hosts.inventory import allocatable_of_status, parse_size
from libvirt_provider.hosts.placement import HostView

__all__ = ["host_view", "host_views"]


def host_view(
    obj: Mapping[str, Any],
    heartbeat: dt.datetime | None,
    now: dt.datetime,
    grace: float = HEARTBEAT_GRACE_SECONDS,
) -> HostView | None:
    """A LibvirtHost and its heartbeat (the Lease's last renewal) as placement compares them;
    None before its daemon has written a first inventory. Ready only with a fresh heartbeat and
    the `Ready` condition True; a spec that does not parse (a user's edit) counts as defaults."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    offers = status.get("offers")
    room = allocatable_of_status(status)
    if not isinstance(offers, Mapping) or room is None:
        return None
    try:
        spec = LibvirtHostSpec.model_validate(obj.get("spec") or {})
    except ValidationError:
        spec = LibvirtHostSpec()
    ready_condition = find_condition(status.get("conditions"), HOST_CONDITION_READY) or {}
    beating = fresh(heartbeat, now, grace)
    pools = {
        str(p.get("name")): parse_size(p.get("available"))
        for p in (status.get("capacity") or {}).get("pools") or []
    }
    return HostView(
        name=str(meta.get("name")),
        labels=dict(meta.get("labels") or {}),
        ready=beating and ready_condition.get("status") == "True",
        heartbeat_lost=not beating,
        unschedulable=spec.unschedulable,
        cpus=room[0],
        memory=room[1],
        pools=pools,
        domain_types=frozenset(offers.get("domainTypes") or ()),
        networks=frozenset(offers.get("networks") or ()),
        machine_types=frozenset(offers.get("machineTypes") or ()),
        uefi=bool(offers.get("uefi")),
    )


def host_views(
    hosts: Iterable[Mapping[str, Any]],
    heartbeats: Mapping[str, dt.datetime],
    now: dt.datetime,
    grace: float = HEARTBEAT_GRACE_SECONDS,
) -> list[HostView]:
    """Every LibvirtHost with an inventory, by name, each with its heartbeat from `heartbeats`
    (renewal time by host name) judged against `grace`."""
    views = []
    for obj in hosts:
        view = host_view(obj, heartbeats.get(str(obj["metadata"]["name"])), now, grace)
        if view is not None:
            views.append(view)
    return sorted(views, key=lambda v: v.name)
