"""A LibvirtMachine and its VirtualMachine as placement reads them (pure).

Placement reads raw objects from watch-fed copies. This module says which machines it places,
which host a machine has, what a machine asks of placement (its `Request` and its `ResolverFit`,
or why its spec is invalid: one model check for both the machines it places and the ones it
accounts for), and what a binding refused for a stale resourceVersion means.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from catalog.lookup import Catalog
from generic.api import VirtualMachineSpec
from generic.conditions import find_condition
from generic.constants import CONDITION_INFRASTRUCTURE_READY, LINK_ANNOTATION
from generic.formats import parse_time, validation_details
from libvirt_provider.api import LibvirtMachine, SpreadBy
from libvirt_provider.constants import (
    HOST_LABEL,
    REASON_HOST_LABEL_RESTORED,
    REASON_INVALID_SPEC,
    REASON_NOT_ADMITTED,
)
from libvirt_provider.hosts.fit import ResolverFit
from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.hosts.placement import HostView, Request
from libvirt_provider.hosts.report import Event, Report

__all__ = [
    "Asked",
    "HostRecord",
    "Wake",
    "after_conflict",
    "ask",
    "binding",
    "demand_on",
    "host_of",
    "host_record",
    "host_record_event",
    "key_of",
    "linked_vm_key",
    "machine_event_wakes",
    "not_admitted",
    "older_than",
    "per_host_pools",
    "preempted_at",
    "preemption_mark",
    "request_of",
    "spread_group",
    "unplaced",
    "vm_event_wakes",
]

Obj = Mapping[str, Any]


class Wake(enum.Enum):
    """What a watch event means for the placer's next pass."""

    NOW = "now"
    IF_WAITING = "if waiting"  # only while some machine waits (capacity may have been freed)
    NO = "no"


def machine_event_wakes(kind: str, obj: Obj | None) -> Wake:
    """Machines change all the time (their status); only what can change a placement wakes the
    placer: a machine without a host (or whose label does not follow spec.host yet), one going
    away (capacity freed)."""
    if obj is None:
        return Wake.NOW
    spec, meta = obj.get("spec") or {}, obj.get("metadata") or {}
    if not spec.get("host") or (meta.get("labels") or {}).get(HOST_LABEL) != spec.get("host"):
        return Wake.NOW
    if kind == "DELETED" or meta.get("deletionTimestamp"):
        return Wake.IF_WAITING
    return Wake.NO


def vm_event_wakes(kind: str) -> Wake:
    """A new VM may be what an unplaced machine waits for (its watch and the machines' are
    separate streams: the machine can arrive first)."""
    return Wake.NOW if kind == "ADDED" else Wake.IF_WAITING


def key_of(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def spread_group(obj: Obj) -> tuple[str, str] | None:
    """(namespace, spreadGroup): groups are per namespace."""
    placement = (obj.get("spec") or {}).get("placement") or {}
    group = placement.get("spreadGroup")
    namespace = (obj.get("metadata") or {}).get("namespace")
    return (str(namespace), str(group)) if group else None


def unplaced(obj: Obj) -> bool:
    """No host named by `spec.host` nor by the label, and not being deleted: placement's to bind."""
    meta = obj.get("metadata") or {}
    return (
        not (obj.get("spec") or {}).get("host")
        and not (meta.get("labels") or {}).get(HOST_LABEL)
        and not meta.get("deletionTimestamp")
    )


def host_of(obj: Obj) -> str | None:
    """The machine's host: spec.host, or (pinned by label, spec.host not yet recorded by the
    placer) the label. Never the label when spec.host is set: a relabel moves nothing."""
    meta = obj.get("metadata") or {}
    host = (obj.get("spec") or {}).get("host") or (meta.get("labels") or {}).get(HOST_LABEL)
    return str(host) if host else None


@dataclass(frozen=True)
class HostRecord:
    """What makes a machine's spec.host and host label agree: `host` written into the label, and
    into spec.host too when `record` (a pin by label alone: each daemon selects its machines by
    spec.host, so the machine is built only once spec.host names it); `replaced` the other host
    the label named, which it no longer does (None when the label was missing)."""

    host: str
    record: bool = False
    replaced: str | None = None


def host_record(obj: Obj) -> HostRecord | None:
    """The write that makes the label follow spec.host (spec.host wins: it is immutable once set,
    the label anyone may edit), or spec.host follow a pin by label; None when they agree."""
    meta = obj.get("metadata") or {}
    spec_host = (obj.get("spec") or {}).get("host")
    label = (meta.get("labels") or {}).get(HOST_LABEL)
    if spec_host:
        if label == spec_host:
            return None
        return HostRecord(str(spec_host), replaced=str(label) if label else None)
    if label:
        return HostRecord(str(label), record=True)
    return None


def host_record_event(record: HostRecord) -> Event | None:
    """The Warning a restored label gets, so `kubectl describe` says why it changed back."""
    if record.replaced is None:
        return None
    return Event(
        REASON_HOST_LABEL_RESTORED,
        f"the label {HOST_LABEL} named host {record.replaced!r}, but this machine is bound to "
        f"host {record.host!r} (spec.host, which cannot change); the label was set back to "
        f"{record.host!r}: a machine never moves, and it stays served and deleted there",
        warning=True,
    )


def not_admitted(obj: Obj) -> bool:
    """The machine's host refused it and it has no domain: it takes nothing there (placement
    does not count it; the host's daemon does not either)."""
    status = obj.get("status") or {}
    if status.get("providerID"):
        return False
    ready = find_condition(status.get("conditions"), CONDITION_INFRASTRUCTURE_READY) or {}
    return ready.get("reason") == REASON_NOT_ADMITTED


def preempted_at(obj: Obj) -> str | None:
    """When placement preempted the machine (RFC 3339), while it is preempted; else None."""
    preemption = (obj.get("status") or {}).get("preemption") or {}
    at = preemption.get("preemptedAt") if isinstance(preemption, Mapping) else None
    return str(at) if at else None


def preemption_mark(at: str | None, preempted_for: str | None = None) -> dict[str, Any]:
    """The status patch that preempts a machine (`at` its time) or, with None, ends it."""
    if at is None:
        return {"preemption": None}
    return {"preemption": {"preemptedAt": at, "preemptedFor": preempted_for}}


def older_than(obj: Obj, seconds: float, *, now: dt.datetime) -> bool:
    """True when the object was created at least `seconds` before `now` (or its creation time is
    unknown)."""
    created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    return created is None or (now - created).total_seconds() >= seconds


def linked_vm_key(obj: Obj) -> str | None:
    """`namespace/name` of the VirtualMachine the machine's link annotation names."""
    meta = obj.get("metadata") or {}
    name = (meta.get("annotations") or {}).get(LINK_ANNOTATION)
    return f"{meta.get('namespace')}/{name}" if name else None


@dataclass(frozen=True)
class Asked:
    """What one machine asks of placement: its constraints, and "fits" for each host."""

    request: Request
    fit: ResolverFit


def ask(
    obj: Obj, vm: Obj, catalog: Catalog, per_host_pools: AbstractSet[str] = frozenset()
) -> Asked | Report:
    """The machine and its VM through their models, or the `InvalidSpec` report when either
    does not parse."""
    try:
        machine = LibvirtMachine.model_validate(obj)
        spec = VirtualMachineSpec.model_validate(vm.get("spec") or {})
    except ValidationError as err:
        where = "LibvirtMachine" if "metadata" in str(err) else "VirtualMachine.spec"
        message = "; ".join(f"{p}: {m}" for p, m in validation_details(err, where))
        return Report(REASON_INVALID_SPEC, message)
    fit = ResolverFit(
        vm_name=str((vm.get("metadata") or {}).get("name")),
        vm=spec,
        machine=machine,
        catalog=catalog,
        per_host_pools=per_host_pools,
    )
    return Asked(request_of(machine, spec), fit)


def request_of(machine: LibvirtMachine, vm: VirtualMachineSpec) -> Request:
    """What the machine asks of any host it goes to (placement's filters and a host's
    admission read the same)."""
    placement = machine.spec.placement
    return Request(
        namespace=machine.metadata.namespace,
        failure_domain=vm.failure_domain,
        selector=placement.host_selector if placement else None,
        spread_group=placement.spread_group if placement else None,
        spread_by=placement.spread_by if placement else SpreadBy.HOST,
    )


def per_host_pools(catalog: Catalog) -> frozenset[str]:
    """The hosts some storage class maps to a pool of their own (`hostPools`): each resolves on
    its own, not as one of its shape."""
    return frozenset(name for sc in catalog.storage_classes.values() for name in sc.spec.host_pools)


def demand_on(asked: Asked | Report, host: HostView) -> Demand:
    """What a placed machine takes on its host: nothing when it cannot be resolved there (then
    nothing is built for it either)."""
    if isinstance(asked, Report):
        return Demand()
    found = asked.fit(host)
    return found if isinstance(found, Demand) else Demand()


def binding(host: str, resource_version: str) -> dict[str, Any]:
    """The patch that binds a machine: spec.host and the label derived from it, in one write,
    conditioned on the resourceVersion the decision was made on."""
    return {
        "metadata": {"resourceVersion": resource_version, "labels": {HOST_LABEL: host}},
        "spec": {"host": host},
    }


def after_conflict(obj: Obj, fresh: Obj | None) -> bool | str:
    """A binding of `obj` refused for its resourceVersion, and `fresh` the machine read again
    (None: it is gone). True when there is nothing to bind (gone); False when the machine must be
    decided again (placed meanwhile, or its spec changed); else the resourceVersion to bind again
    with: it changed elsewhere, most often by the generic controller adopting it (an owner
    reference), and the decision stands while the spec is the same."""
    if fresh is None or not unplaced(fresh):
        return fresh is None
    if fresh["metadata"].get("generation") != (obj.get("metadata") or {}).get("generation"):
        return False
    return str(fresh["metadata"]["resourceVersion"])
