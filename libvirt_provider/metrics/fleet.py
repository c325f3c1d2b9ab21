"""Host and machine-state metrics from what the daemon already holds (pure).

A host's figures come from its LibvirtHost as the host agent's watch last showed it (the status
the agent itself writes: the Ready condition, capacity, allocatable, allocated and each pool's
sizes); the machines by state from the watch-fed copies of the host's LibvirtMachines (their
`powerState` and the reason of their InfrastructureReady condition). No API or libvirt call is
made for a scrape.

Each machine's readiness is also served on its own (`vmapi_machine_ready`), with the power state
its VirtualMachine asks for: the counts by state cannot tell one machine stuck for an hour from
many passing through `Starting`, which is what an alert on a machine not Ready for 15 minutes
while it should run needs. One series per machine of the host, made at each scrape.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, get_args

from catalog.quantity import QuantityError, parse_quantity
from generic import constants as vmapi
from generic.api import PowerState
from generic.conditions import find_condition
from libvirt_provider.constants import HOST_CONDITION_READY, METRICS_PREFIX
from libvirt_provider.metrics.machine_stats import MACHINE_LABELS, Family, Kind, Sample

__all__ = [
    "HOST_FAMILIES",
    "DesiredPower",
    "MachineReadiness",
    "MachineState",
    "host_samples",
    "machine_readiness",
    "machine_state",
    "readiness_samples",
    "state_samples",
    "vm_desired_power",
]

_HOST = f"{METRICS_PREFIX}_host"
_POOL = ("host", "pool")
NONE = "None"
"""The label value of a state a machine does not report (no powerState in transition, no
condition before its first pass)."""


def _gauge(suffix: str, help: str, labels: tuple[str, ...] = ("host",)) -> Family:
    return Family(f"{_HOST}_{suffix}", Kind.GAUGE, help, labels)


READY = _gauge("ready", "1 while the host's LibvirtHost has Ready=True.")
KNOWN = _gauge("status_known", "1 when the daemon holds the host's LibvirtHost with a status.")
CAPACITY_CPUS = _gauge("capacity_cpus", "Host CPUs (libvirt node info).")
CAPACITY_MEMORY = _gauge("capacity_memory_bytes", "Host memory (libvirt node info).")
ALLOCATABLE_CPUS = _gauge("allocatable_cpus", "vCPUs that may be placed on the host.")
ALLOCATABLE_MEMORY = _gauge("allocatable_memory_bytes", "Memory that may be placed on the host.")
ALLOCATED_CPUS = _gauge("allocated_cpus", "vCPUs of the machines on the host.")
ALLOCATED_MEMORY = _gauge("allocated_memory_bytes", "Memory of the machines on the host.")
ALLOCATED_MACHINES = _gauge("allocated_machines", "Machines counted on the host.")
POOL_CAPACITY = _gauge("pool_capacity_bytes", "Size of the host's storage pool.", _POOL)
POOL_AVAILABLE = _gauge("pool_available_bytes", "Free space in the host's storage pool.", _POOL)
MACHINES = _gauge(
    "machines",
    "The host's LibvirtMachines by power state and InfrastructureReady reason.",
    ("host", "power_state", "reason"),
)

MACHINE_READY = Family(
    f"{METRICS_PREFIX}_machine_ready",
    Kind.GAUGE,
    "1 while the LibvirtMachine's InfrastructureReady condition is True; desired_power_state is "
    "its VirtualMachine's spec.powerState.",
    (*MACHINE_LABELS, "desired_power_state"),
)

HOST_FAMILIES: tuple[Family, ...] = (
    READY,
    KNOWN,
    CAPACITY_CPUS,
    CAPACITY_MEMORY,
    ALLOCATABLE_CPUS,
    ALLOCATABLE_MEMORY,
    ALLOCATED_CPUS,
    ALLOCATED_MEMORY,
    ALLOCATED_MACHINES,
    POOL_CAPACITY,
    POOL_AVAILABLE,
    MACHINES,
    MACHINE_READY,
)


def _count(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _bytes(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return float(value)
    if not isinstance(value, str):
        return None
    try:
        return float(parse_quantity(value))
    except QuantityError:
        return None


def _section(status: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    section = status.get(key)
    return section if isinstance(section, Mapping) else {}


def host_samples(host: str, obj: Mapping[str, Any] | None) -> list[Sample]:
    """The host's samples from its LibvirtHost; a figure the status lacks is left out, and a host
    whose object is not held (yet) says only `status_known` 0."""
    status = (obj or {}).get("status")
    if not isinstance(status, Mapping) or not status:
        return [Sample(KNOWN, (host,), 0.0)]
    labels = (host,)
    ready = find_condition(status.get("conditions"), HOST_CONDITION_READY)
    samples = [
        Sample(KNOWN, labels, 1.0),
        Sample(READY, labels, 1.0 if (ready or {}).get("status") == "True" else 0.0),
    ]
    capacity = _section(status, "capacity")
    allocatable = _section(status, "allocatable")
    allocated = _section(status, "allocated")
    figures = (
        (CAPACITY_CPUS, _count(capacity.get("cpus"))),
        (CAPACITY_MEMORY, _bytes(capacity.get("memory"))),
        (ALLOCATABLE_CPUS, _count(allocatable.get("cpus"))),
        (ALLOCATABLE_MEMORY, _bytes(allocatable.get("memory"))),
        (ALLOCATED_CPUS, _count(allocated.get("cpus"))),
        (ALLOCATED_MEMORY, _bytes(allocated.get("memory"))),
        (ALLOCATED_MACHINES, _count(allocated.get("machines"))),
    )
    samples += [Sample(family, labels, value) for family, value in figures if value is not None]
    pools = capacity.get("pools")
    for pool in pools if isinstance(pools, list) else []:
        name = pool.get("name") if isinstance(pool, Mapping) else None
        if not isinstance(name, str) or not name:
            continue
        for family, key in ((POOL_CAPACITY, "capacity"), (POOL_AVAILABLE, "available")):
            value = _bytes(pool.get(key))
            if value is not None:
                samples.append(Sample(family, (host, name), value))
    return samples


MachineState = tuple[str, str]
"""(power state, InfrastructureReady reason) of one machine, `NONE` for what it lacks."""


def machine_state(obj: Mapping[str, Any]) -> MachineState:
    """What `state_samples` counts of one LibvirtMachine."""
    status = obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    power = status.get("powerState")
    condition = find_condition(status.get("conditions"), vmapi.CONDITION_INFRASTRUCTURE_READY)
    reason = (condition or {}).get("reason")
    return (
        power if isinstance(power, str) and power else NONE,
        reason if isinstance(reason, str) and reason else NONE,
    )


def state_samples(host: str, states: Iterable[MachineState]) -> list[Sample]:
    """One sample per (power state, reason) the host's machines are in, with their count."""
    counts = Counter(states)
    return [
        Sample(MACHINES, (host, power, reason), float(n))
        for (power, reason), n in sorted(counts.items())
    ]


DesiredPower = tuple[tuple[str, str], str]
"""((namespace, name) of a VirtualMachine, the power state its spec asks for)."""


def vm_desired_power(vm: Mapping[str, Any]) -> DesiredPower:
    """What a VirtualMachine asks for, as the machine's reconcile reads it: `spec.powerState`,
    PoweredOn when it is absent or not one the API knows (the CRD defaults and checks it)."""
    meta = vm.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    spec = vm.get("spec")
    desired = spec.get("powerState") if isinstance(spec, Mapping) else None
    state = desired if desired in get_args(PowerState) else vmapi.POWERED_ON
    return (str(meta.get("namespace")), str(meta.get("name"))), str(state)


@dataclass(frozen=True)
class MachineReadiness:
    """One machine's `vmapi_machine_ready` sample, before the host is added."""

    namespace: str
    name: str
    ready: bool
    desired: str
    """Its VirtualMachine's desired power state; `NONE` when the machine names no VM (its link
    annotation is missing) or the daemon holds no copy of the VM it names."""


def machine_readiness(
    obj: Mapping[str, Any], desired: Mapping[tuple[str, str], str]
) -> MachineReadiness:
    """One LibvirtMachine's readiness, with the desired power state of the VirtualMachine its
    link annotation names, looked up in `desired` (from `vm_desired_power` of the held VMs)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    annotations = meta.get("annotations")
    vm = annotations.get(vmapi.LINK_ANNOTATION) if isinstance(annotations, Mapping) else None
    status = obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    condition = find_condition(status.get("conditions"), vmapi.CONDITION_INFRASTRUCTURE_READY)
    return MachineReadiness(
        namespace=namespace,
        name=name,
        ready=(condition or {}).get("status") == vmapi.STATUS_TRUE,
        desired=desired.get((namespace, vm), NONE) if isinstance(vm, str) and vm else NONE,
    )


def readiness_samples(host: str, machines: Iterable[MachineReadiness]) -> list[Sample]:
    """One `vmapi_machine_ready` sample per machine of the host."""
    return [
        Sample(MACHINE_READY, (m.namespace, m.name, host, m.desired), 1.0 if m.ready else 0.0)
        for m in machines
    ]
