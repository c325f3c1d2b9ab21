"""A LibvirtHost's status from libvirt's facts, the user's spec and the machines placed there.

Pure: the host agent reads libvirt and the API, this module says what the status should be, and
the agent writes it only when it differs (a status that changes with every free byte would be a
write every heartbeat on every host). Sizes are floored to whole MiB for the same reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from catalog.quantity import QuantityError, parse_quantity
from generic.api import Condition
from libvirt_provider.constants import (
    HOST_CONDITION_CONNECTED as CONDITION_CONNECTED,
)
from libvirt_provider.constants import (
    HOST_CONDITION_DRAINED as CONDITION_DRAINED,
)
from libvirt_provider.constants import (
    HOST_CONDITION_READY as CONDITION_READY,
)
from libvirt_provider.constants import (
    REASON_CONNECTED,
    REASON_HOST_READY,
    REASON_LIBVIRT_UNAVAILABLE,
)
from libvirt_provider.driver.types import HostInventory
from libvirt_provider.host_api import (
    HostAllocatable,
    HostAllocated,
    HostCapacity,
    HostOffers,
    HostPreemptible,
    HostSummary,
    HostVersions,
    LibvirtHostSpec,
    LibvirtHostStatus,
    PoolCapacity,
)
from libvirt_provider.resolved import ResolvedMachine

__all__ = [
    "Allocatable",
    "Demand",
    "allocatable",
    "allocatable_of_status",
    "demand_of",
    "format_size",
    "host_status",
    "parse_size",
    "total",
]

MIB = 2**20


@dataclass(frozen=True)
class Demand:
    """What one machine takes from its host: vCPUs, memory, and bytes of new volumes per pool."""

    cpus: int = 0
    memory: int = 0
    pools: tuple[tuple[str, int], ...] = field(default=())
    # A spot machine's: preemptible (placement may reclaim it for a machine that is not spot).
    spot: bool = False


def demand_of(machine: ResolvedMachine) -> Demand:
    """The resources a resolved machine holds: its boot-time vCPUs and memory (hot-plug headroom
    is not reserved: it is taken only when used) and the capacity of each volume it owns."""
    per_pool: dict[str, int] = {}
    for volume in machine.volumes:
        per_pool[volume.pool] = per_pool.get(volume.pool, 0) + volume.capacity_bytes
    return Demand(
        cpus=machine.domain.cpu.vcpus,
        memory=machine.domain.memory.current_mib * MIB,
        pools=tuple(sorted(per_pool.items())),
        spot=machine.spot,
    )


def total(demands: Iterable[Demand]) -> Demand:
    cpus = memory = 0
    for demand in demands:
        cpus += demand.cpus
        memory += demand.memory
    return Demand(cpus=cpus, memory=memory)


@dataclass(frozen=True)
class Allocatable:
    cpus: int
    memory: int


def allocatable(inventory: HostInventory, spec: LibvirtHostSpec) -> Allocatable:
    """(capacity - reserved) x overcommit, as Nova computes it; never below zero."""
    reserved_memory = parse_size(spec.reserved.memory)
    cpus = math.floor(max(0, inventory.cpus - spec.reserved.cpus) * spec.overcommit.cpu)
    memory = math.floor(max(0, inventory.memory - reserved_memory) * spec.overcommit.memory)
    return Allocatable(cpus=cpus, memory=memory // MIB * MIB)


def format_size(size: int) -> str:
    """`size` floored to whole MiB, in the shortest exact spelling (`2Gi`, `1536Mi`)."""
    mib = max(0, size) // MIB
    if mib == 0:
        return "0"
    if mib % 1024 == 0:
        return f"{mib // 1024}Gi"
    return f"{mib}Mi"


def parse_size(text: str | None) -> int:
    """The bytes a status quantity stands for; a malformed one (a user's edit) counts as 0."""
    if not text:
        return 0
    try:
        return parse_quantity(text)
    except QuantityError:
        return 0


def allocatable_of_status(status: Mapping[str, Any]) -> tuple[int, int] | None:
    """(vCPUs, memory bytes) a LibvirtHost's status says may be placed there; None when it has
    no figures yet or they are not figures (a user's edit, until its daemon puts them back)."""
    room = status.get("allocatable")
    if not isinstance(room, Mapping):
        return None
    cpus = room.get("cpus")
    if not isinstance(cpus, int) or isinstance(cpus, bool):
        return None
    return cpus, parse_size(str(room.get("memory") or ""))


# A pool's free space is written again only once it moved by this share of the pool's capacity
# (at least 1 MiB) from the figure written last: pools are rescanned every heartbeat, and a
# pool on a busy filesystem changes by megabytes each time, which would rewrite every host's
# status every 10 s for a figure nobody needs to the megabyte.
POOL_AVAILABLE_STEP = 0.01


def _reported_available(
    name: str, capacity: int, available: int, previous: LibvirtHostStatus | None
) -> str:
    """The pool's free space as status says it: the figure written last while the pool's size
    is the same and its free space moved by less than `POOL_AVAILABLE_STEP` of it."""
    fresh = format_size(available)
    before = next(
        (
            p
            for p in ((previous.capacity.pools or []) if previous and previous.capacity else [])
            if p.name == name
        ),
        None,
    )
    if before is None or parse_size(before.capacity) != parse_size(format_size(capacity)):
        return fresh
    step = max(MIB, int(capacity * POOL_AVAILABLE_STEP))
    if abs(parse_size(before.available) - available) < step:
        return before.available
    return fresh


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f}Gi"


def host_status(
    inventory: HostInventory | None,
    spec: LibvirtHostSpec,
    *,
    allocated: Demand,
    machines: int,
    problem: str | None,
    previous: LibvirtHostStatus | None,
    generation: int | None,
    now: str,
    connection: tuple[str, str] | None = None,
    preemptible: tuple[Demand, int] | None = None,
) -> dict[str, Any]:
    """The status body to write. Without an inventory (libvirtd unreachable) the last known
    figures stay and only Ready turns False. `connection` (a remote host's: the `Connected`
    reason and message) adds the `Connected` condition; `preemptible` what of `allocated` spot
    machines take (and how many there are)."""
    ready = problem is None and inventory is not None
    body: dict[str, Any] = (
        previous.model_dump(by_alias=True, exclude_none=True, mode="json")
        if previous is not None
        else {}
    )
    if inventory is not None:
        room = allocatable(inventory, spec)
        body["capacity"] = HostCapacity(
            cpus=inventory.cpus,
            memory=format_size(inventory.memory),
            pools=[
                PoolCapacity(
                    name=p.name,
                    capacity=format_size(p.capacity),
                    available=_reported_available(p.name, p.capacity, p.available, previous),
                )
                for p in inventory.pools
            ],
        ).model_dump(by_alias=True, mode="json")
        body["allocatable"] = HostAllocatable(
            cpus=room.cpus, memory=format_size(room.memory)
        ).model_dump(by_alias=True, mode="json")
        body["offers"] = HostOffers(
            domain_types=sorted(inventory.domain_types),
            machine_types=sorted(inventory.machine_types),
            uefi=inventory.uefi,
            networks=sorted(inventory.networks),
            pools=sorted(p.name for p in inventory.pools),
        ).model_dump(by_alias=True, mode="json")
        body["versions"] = HostVersions(
            libvirt=inventory.libvirt_version, hypervisor=inventory.hypervisor_version
        ).model_dump(by_alias=True, mode="json")
        body["summary"] = HostSummary(
            cpus=f"{allocated.cpus}/{room.cpus}",
            memory=f"{_gib(allocated.memory)}/{_gib(room.memory)}",
        ).model_dump(by_alias=True, mode="json")
        body["observedGeneration"] = generation
    spot, spot_machines = preemptible or (Demand(), 0)
    body["allocated"] = HostAllocated(
        cpus=allocated.cpus,
        memory=format_size(allocated.memory),
        machines=machines,
        preemptible=HostPreemptible(
            cpus=spot.cpus, memory=format_size(spot.memory), machines=spot_machines
        )
        if spot_machines
        else None,
    ).model_dump(by_alias=True, mode="json", exclude_none=True)
    old = {c.type: c for c in (previous.conditions or [])} if previous is not None else {}
    reason = REASON_HOST_READY if ready else REASON_LIBVIRT_UNAVAILABLE
    message = "the daemon runs and reaches libvirtd" if ready else (problem or "no inventory")
    status = "True" if ready else "False"
    before = old.get(CONDITION_READY)
    since = before.last_transition_time if before is not None and before.status == status else now
    body["conditions"] = [
        Condition(
            type=CONDITION_READY,
            status=status,
            reason=reason,
            message=message[:1024],
            last_transition_time=since,
        ).model_dump(by_alias=True, exclude_none=True, mode="json")
    ]
    if connection is not None:
        linked = connection[0] == REASON_CONNECTED
        link_status = "True" if linked else "False"
        before = old.get(CONDITION_CONNECTED)
        link_since = (
            before.last_transition_time
            if before is not None and before.status == link_status
            else now
        )
        body["conditions"].append(
            Condition(
                type=CONDITION_CONNECTED,
                status=link_status,
                reason=connection[0],
                message=connection[1][:1024],
                last_transition_time=link_since,
            ).model_dump(by_alias=True, exclude_none=True, mode="json")
        )
    # The drain's condition (and status.drain, kept with the rest of `previous`) are the drain
    # controller's (`adapters/host/drain.py`): carried as the object shows them.
    drained = old.get(CONDITION_DRAINED)
    if drained is not None:
        body["conditions"].append(drained.model_dump(by_alias=True, exclude_none=True, mode="json"))
    # Through the model, so that every default the API server fills in (the CRD is generated
    # from the same model) is already here: a status equal to the object's means no write.
    status_model = LibvirtHostStatus.model_validate(
        {k: v for k, v in body.items() if v is not None}
    )
    return status_model.model_dump(by_alias=True, exclude_none=True, mode="json")
