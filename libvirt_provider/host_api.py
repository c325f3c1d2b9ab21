"""The `LibvirtHost` kind (cluster-scoped, `infrastructure.vm-api.io/v1alpha1`): one per KVM host.

Why a kind of its own: placement needs to know what every host offers and has left, and users need
to see it (`kubectl get lvh`) and to cordon a host. A host's daemon creates its object and keeps
its status current; the spec (overcommit, reservations, cordon) and the labels (a zone, say) are
the user's. Sizes in status are Kubernetes quantities rounded down to whole MiB, so that they read
well and a few bytes of drift never cause a write.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from catalog.base import KubeModel
from catalog.quantity import QUANTITY_SCHEMA, parse_quantity
from generic.api import Condition
from libvirt_provider.constants import (
    DEFAULT_HOST_BURST,
    DEFAULT_HOST_QPS,
    DEFAULT_MAX_CONCURRENT_OPERATIONS,
    DRAIN_MAX_ATTEMPTS,
)

__all__ = [
    "DEFAULT_CPU_OVERCOMMIT",
    "DEFAULT_MEMORY_OVERCOMMIT",
    "DrainCounts",
    "DrainedMachine",
    "HostAllocatable",
    "HostAllocated",
    "HostCapacity",
    "HostConnection",
    "HostDrain",
    "HostDrainStatus",
    "HostOffers",
    "HostPreemptible",
    "HostSummary",
    "HostVersions",
    "LibvirtHostSpec",
    "LibvirtHostStatus",
    "Overcommit",
    "PoolCapacity",
    "RateLimit",
    "Reserved",
    "SecretReference",
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


class SecretReference(KubeModel):
    """A Secret in the daemon's own namespace (a cluster-scoped object must not become a way to
    read another namespace's Secrets: a namespace other than the daemon's is refused)."""

    name: str = Field(min_length=1, max_length=253, description="The Secret's name.")
    namespace: str | None = Field(
        default=None,
        max_length=63,
        description="Must be the daemon's own namespace when given (any other is refused).",
    )


class HostConnection(KubeModel):
    """How a daemon in remote mode reaches this host's libvirtd."""

    uri: str = Field(
        min_length=1,
        max_length=1024,
        description="libvirt URI: qemu+ssh://user@host[:port]/system, "
        "qemu+libssh://user@host[:port]/system or qemu+tls://host[:port]/system. No query "
        "parameters: the daemon sets the transport's own (key files, host-key checking).",
    )
    secret_ref: SecretReference | None = Field(
        default=None,
        description="Credentials: ssh-privatekey and known_hosts for SSH (host keys are always "
        "verified); ca.crt, tls.crt and tls.key for TLS.",
    )


class RateLimit(KubeModel):
    """A token bucket over the calls to the host's libvirtd."""

    qps: float = Field(
        default=DEFAULT_HOST_QPS,
        gt=0,
        le=10000,
        description=f"Calls per second on average. Default {DEFAULT_HOST_QPS:g}.",
    )
    burst: int = Field(
        default=DEFAULT_HOST_BURST,
        ge=1,
        le=100000,
        description=f"Calls allowed at once above the average. Default {DEFAULT_HOST_BURST}.",
    )


class HostDrain(KubeModel):
    """Empty the host: every machine on it moves, powers off or blocks, by its evictionStrategy
    (docs/migration.md, "Draining a host"). Clearing it cancels the drain; the cordon stays."""

    dry_run: bool = Field(
        default=False,
        description="Publish only the plan (status.drain): nothing moves, nothing powers off.",
    )
    on_cancel: Literal["Finish", "Abort"] = Field(
        default="Finish",
        description="When the drain is cleared: Finish lets its running migrations end; Abort "
        "deletes them (each running copy is aborted, the machine keeps running here).",
    )


class LibvirtHostSpec(KubeModel):
    """The user's settings for the host; the daemon never writes them."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.drain) || (has(self.unschedulable) && self.unschedulable)",
                    "message": "a drain needs the host cordoned: set spec.unschedulable: true "
                    "with spec.drain (and clear spec.drain before uncordoning)",
                }
            ]
        }
    )

    unschedulable: bool = Field(
        default=False,
        description="Cordon: no new machine is placed here; machines already here stay.",
    )
    overcommit: Overcommit = Field(default_factory=Overcommit, description="Overcommit ratios.")
    reserved: Reserved = Field(default_factory=Reserved, description="Capacity kept for the host.")
    connection: HostConnection | None = Field(
        default=None,
        description="Set for a remote host (one that runs no daemon of its own): served by a "
        "daemon in remote mode. Unset: the host's own daemon serves it over the local socket.",
    )
    rate_limit: RateLimit = Field(
        default_factory=RateLimit, description="Client-side bound on calls to libvirtd."
    )
    max_concurrent_operations: int = Field(
        default=DEFAULT_MAX_CONCURRENT_OPERATIONS,
        ge=1,
        le=256,
        description="libvirt calls in flight at once toward this host. Default "
        f"{DEFAULT_MAX_CONCURRENT_OPERATIONS}.",
    )
    drain: HostDrain | None = Field(
        default=None,
        description="Set to drain the host (it must be cordoned too); cleared, the drain is "
        "cancelled. `kubectl vm drain HOST` sets both.",
    )


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


class HostPreemptible(KubeModel):
    cpus: int = Field(default=0, ge=0, description="vCPUs of the spot machines on this host.")
    memory: Quantity = Field(default="0", description="Memory of the spot machines on this host.")
    machines: int = Field(default=0, ge=0, description="Spot machines on this host.")


class HostAllocated(KubeModel):
    cpus: int = Field(default=0, ge=0, description="vCPUs of the machines on this host.")
    memory: Quantity = Field(default="0", description="Memory of the machines on this host.")
    machines: int = Field(default=0, ge=0, description="Machines on this host.")
    preemptible: HostPreemptible | None = Field(
        default=None,
        description="The part of the above that spot machines take: placement may reclaim it "
        "for machines that are not spot. Absent when the host runs no spot machine.",
    )


class HostSummary(KubeModel):
    """Pre-formatted `allocated/allocatable` pairs, for the printer columns."""

    cpus: str = Field(default="", max_length=64, description="vCPUs allocated/allocatable.")
    memory: str = Field(default="", max_length=64, description="Memory allocated/allocatable.")


Name = Annotated[str, Field(max_length=253)]
Text = Annotated[str, Field(max_length=1024)]


class DrainedMachine(KubeModel):
    """One machine of the drain's plan: where it goes, or why it cannot, and how far it got."""

    namespace: Name = Field(description="The LibvirtMachine's namespace.")
    name: Name = Field(description="The LibvirtMachine's name.")
    strategy: Literal["LiveMigrate", "PowerOff", "None"] = Field(
        description="Its evictionStrategy."
    )
    state: Literal[
        "Pending", "Migrating", "PoweringOff", "Moved", "PoweredOff", "Stopped", "Gone", "Blocked"
    ] = Field(
        description="Pending (to move), Migrating, PoweringOff, then Moved, PoweredOff, Stopped "
        "(not running: left on the host) or Gone (deleted, or moved by someone else); Blocked "
        "with the reason."
    )
    target: Name | None = Field(
        default=None,
        description="Where placement's filters send it (planned; the source's daemon chooses "
        "again when the migration starts), or where it went.",
    )
    reason: Text | None = Field(default=None, description="Why it cannot go, or waits.")
    migration: Name | None = Field(
        default=None, description="The drain's current LibvirtMigration of it (its namespace)."
    )
    attempts: int = Field(
        default=0,
        ge=0,
        description=f"Migrations of it that failed (at {DRAIN_MAX_ATTEMPTS} it is Blocked).",
    )


class DrainCounts(KubeModel):
    total: int = Field(default=0, ge=0, description="Machines in the plan.")
    moved: int = Field(default=0, ge=0, description="Moved to another host.")
    migrating: int = Field(default=0, ge=0, description="Migrating now (or waiting for a slot).")
    pending: int = Field(default=0, ge=0, description="Not started yet.")
    powered_off: int = Field(
        default=0, ge=0, description="Powered off (PowerOff), or powering off."
    )
    left: int = Field(default=0, ge=0, description="Left on the host: not running, or gone.")
    blocked: int = Field(default=0, ge=0, description="Cannot go (see each machine's reason).")


class HostDrainStatus(KubeModel):
    """The drain's plan and progress, written by the host's own daemon."""

    phase: Literal["Planning", "Planned", "Draining", "Drained", "Blocked"] = Field(
        description="Planning (the plan is published, nothing moved yet), Planned (a dry run), "
        "Draining, Drained or Blocked."
    )
    id: int = Field(
        ge=0, description="The host's generation when the drain began (names its migrations)."
    )
    dry_run: bool = Field(default=False, description="As spec.drain.dryRun was last seen.")
    on_cancel: Literal["Finish", "Abort"] = Field(
        default="Finish", description="As spec.drain.onCancel was last seen."
    )
    start_time: str | None = Field(default=None, description="When the drain began.")
    message: Text = Field(default="", description="Progress: '7 of 10 moved, 2 migrating, ...'.")
    counts: DrainCounts = Field(default_factory=DrainCounts, description="The plan's figures.")
    machines: list[DrainedMachine] = Field(
        default_factory=list, max_length=1024, description="The plan: one entry per machine."
    )


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
        description="Ready: the daemon runs and reaches libvirtd. Drained: the drain's state "
        "(spec.drain). Connected: why it does or does not reach it (AuthenticationFailed, "
        "HostKeyMismatch, Unreachable, SecretNotFound, "
        "ProtocolError, InvalidConnection, InvalidSecret, SecretNotAllowed).",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The spec generation the allocatable figures reflect."
    )
    drain: HostDrainStatus | None = Field(
        default=None,
        description="The drain's plan and progress (spec.drain); the Drained condition follows it.",
    )
