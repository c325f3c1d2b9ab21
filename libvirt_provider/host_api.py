"""The `LibvirtHost` kind (cluster-scoped, `infrastructure.vm-api.io/v1alpha1`): one per KVM host.

Why a kind of its own: placement needs to know what every host offers and has left, and users need
to see it (`kubectl get lvh`) and to cordon a host. A host's daemon creates its object and keeps
its status current; the spec (overcommit, reservations, cordon) and the labels (a zone, say) are
the user's. Sizes in status are Kubernetes quantities rounded down to whole MiB, so that they read
well and a few bytes of drift never cause a write.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from catalog.base import KubeModel
from catalog.quantity import QUANTITY_SCHEMA, parse_quantity
from generic.api import Condition

__all__ = [
    "DEFAULT_CPU_OVERCOMMIT",
    "DEFAULT_MEMORY_OVERCOMMIT",
    "HostAllocatable",
    "HostAllocated",
    "HostCapacity",
    "HostOffers",
    "HostSummary",
    "HostVersions",
    "LibvirtHostSpec",
    "LibvirtHostStatus",
    "Overcommit",
    "PoolCapacity",
    "Reserved",
]

DEFAULT_CPU_OVERCOMMIT = 4.0
"""vCPUs per host CPU: most guests idle most of the time, and an over-busy CPU only slows guests
down (they share time), it never kills one. Nova's default is 16; 4 keeps a busy host usable."""
DEFAULT_MEMORY_OVERCOMMIT = 1.0
"""Memory is not overcommitted by default: a guest that touches memory the host lacks is killed by
the host's OOM killer, which no user expects from a machine that was placed as fitting."""

Quantity = Annotated[str, Field(max_length=64, json_schema_extra=QUANTITY_SCHEMA)]


class Overcommit(KubeModel):
    """How much more than the hardware the host hands out."""

    cpu: float = Field(
        default=DEFAULT_CPU_OVERCOMMIT,
        gt=0,
        le=64,
        description="vCPUs placed per host CPU (after reservations). Default 4.0.",
    )
    memory: float = Field(
        default=DEFAULT_MEMORY_OVERCOMMIT,
        gt=0,
        le=4,
        description="Guest memory placed per byte of host memory (after reservations). "
        "Default 1.0: no overcommit.",
    )


class Reserved(KubeModel):
    """What the host keeps for itself (the OS, libvirtd, qemu's own overhead)."""

    cpus: int = Field(default=0, ge=0, le=4096, description="Host CPUs kept back from guests.")
    memory: Quantity = Field(default="0", description="Host memory kept back from guests.")

    @field_validator("memory")
    @classmethod
    def _quantity(cls, value: str) -> str:
        parse_quantity(value)
        return value


class LibvirtHostSpec(KubeModel):
    """The user's settings for the host; the daemon never writes them."""

    unschedulable: bool = Field(
        default=False,
        description="Cordon: no new machine is placed here; machines already here stay.",
    )
    overcommit: Overcommit = Field(default_factory=Overcommit, description="Overcommit ratios.")
    reserved: Reserved = Field(default_factory=Reserved, description="Capacity kept for the host.")


class PoolCapacity(KubeModel):
    name: str = Field(max_length=253, description="libvirt storage pool name.")
    capacity: Quantity = Field(description="Size of the pool.")
    available: Quantity = Field(description="Free space in the pool, as libvirt reports it.")


class HostCapacity(KubeModel):
    cpus: int = Field(ge=0, description="Host CPUs (libvirt node info).")
    memory: Quantity = Field(description="Host memory (libvirt node info).")
    pools: list[PoolCapacity] = Field(
        default_factory=list, max_length=256, description="Active storage pools."
    )


class HostOffers(KubeModel):
    """What machines placed here may ask for."""

    domain_types: list[Annotated[str, Field(max_length=32)]] = Field(
        default_factory=list, max_length=16, description="kvm, qemu (or test)."
    )
    machine_types: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=512, description="qemu machine types and their aliases."
    )
    uefi: bool = Field(default=False, description="UEFI firmware is installed.")
    networks: list[Annotated[str, Field(max_length=253)]] = Field(
        default_factory=list, max_length=512, description="Active libvirt networks."
    )
    pools: list[Annotated[str, Field(max_length=253)]] = Field(
        default_factory=list, max_length=256, description="Active storage pools."
    )


class HostVersions(KubeModel):
    libvirt: str = Field(default="", max_length=32, description="libvirt library version.")
    hypervisor: str = Field(default="", max_length=64, description="qemu (hypervisor) version.")


class HostAllocatable(KubeModel):
    cpus: int = Field(default=0, ge=0, description="vCPUs that may be placed here.")
    memory: Quantity = Field(default="0", description="Memory that may be placed here.")


class HostAllocated(KubeModel):
    cpus: int = Field(default=0, ge=0, description="vCPUs of the machines on this host.")
    memory: Quantity = Field(default="0", description="Memory of the machines on this host.")
    machines: int = Field(default=0, ge=0, description="Machines on this host.")


class HostSummary(KubeModel):
    """Pre-formatted `allocated/allocatable` pairs, for the printer columns."""

    cpus: str = Field(default="", max_length=64, description="vCPUs allocated/allocatable.")
    memory: str = Field(default="", max_length=64, description="Memory allocated/allocatable.")


class LibvirtHostStatus(KubeModel):
    """Written by the host's daemon only; a user's edit is put back on its next pass."""

    capacity: HostCapacity | None = Field(default=None, description="What the host has.")
    allocatable: HostAllocatable | None = Field(
        default=None,
        description="What may be placed here: (capacity - reserved) x overcommit.",
    )
    allocated: HostAllocated | None = Field(
        default=None, description="What the machines on this host take."
    )
    offers: HostOffers | None = Field(default=None, description="Features machines may ask for.")
    versions: HostVersions | None = Field(default=None, description="libvirt and qemu versions.")
    summary: HostSummary | None = Field(default=None, description="For kubectl get.")
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=8,
        description="Ready: the daemon runs and reaches libvirtd.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The spec generation the allocatable figures reflect."
    )
