"""The `LibvirtMachine` kind (namespaced, `infrastructure.vm-api.io/v1alpha1`): spec and status.

The spec holds only what has no portable equivalent on the generic VirtualMachine: the host, the
domain type, overrides of the image's machine type, firmware and the class's CPU mode, console and
graphics, autostart, the graceful-shutdown timeout and hot-plug headroom. The user owns every spec
field; the controller never writes spec. The status is the controller's: it carries the fields of
the vm-api.io provider status contract plus a few libvirt facts.
"""

from __future__ import annotations

import enum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from catalog.base import KubeModel
from catalog.image import MACHINE_TYPE_PATTERN, Firmware
from catalog.machineclass import CpuSpec
from catalog.quantity import QUANTITY_SCHEMA, parse_quantity
from generic.api import Address, Condition
from libvirt_provider.constants import (
    DEFAULT_SHUTDOWN_TIMEOUT_SECONDS,
    HOST_NAME_MAX_LENGTH,
    HOST_NAME_PATTERN,
    MAX_REPORTED_ADDRESSES,
)

__all__ = [
    "ConsoleSpec",
    "DiskStatus",
    "DomainTypeChoice",
    "GraphicsType",
    "HostSelector",
    "Hotplug",
    "LibvirtMachine",
    "LibvirtMachineSpec",
    "LibvirtMachineStatus",
    "MachineAddress",
    "MachineMeta",
    "ModifyVolumeStatus",
    "Placement",
    "Preemption",
    "RestoreHold",
    "SelectorRequirement",
    "SpreadBy",
]


class DomainTypeChoice(enum.StrEnum):
    """`kvm` needs /dev/kvm; `qemu` is software emulation; `auto` takes kvm when the host has it."""

    KVM = "kvm"
    QEMU = "qemu"
    AUTO = "auto"


class GraphicsType(enum.StrEnum):
    NONE = "None"
    VNC = "VNC"
    SPICE = "SPICE"


class ConsoleSpec(KubeModel):
    serial: bool = Field(default=True, description="Attach a serial console (virsh console).")
    graphics: GraphicsType = Field(
        default=GraphicsType.NONE,
        description="Graphical console: None, VNC (no port: reached through the API server, "
        "kubectl vm vnc) or SPICE (listening on the host's loopback only).",
    )


class Hotplug(KubeModel):
    """Room to grow a running machine without a reboot."""

    max_cpus: int | None = Field(
        default=None,
        alias="maxCPUs",
        ge=1,
        le=1024,
        description="vCPU slots; CPU counts up to this change live. Default: the requested count.",
    )
    max_memory: str | None = Field(
        default=None,
        json_schema_extra=QUANTITY_SCHEMA,
        description="Boot-time memory ceiling; memory up to this changes live (balloon). "
        "Default: the requested memory.",
    )

    @field_validator("max_memory")
    @classmethod
    def _quantity(cls, value: str | None) -> str | None:
        if value is not None:
            parse_quantity(value)
        return value


_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

SubdomainName = Annotated[str, Field(min_length=1, max_length=253, pattern=_SUBDOMAIN)]

HostName = Annotated[
    str, Field(min_length=1, max_length=HOST_NAME_MAX_LENGTH, pattern=HOST_NAME_PATTERN)
]
"""A host's name: a DNS subdomain short enough to be the host label's value (see constants)."""


LabelKey = Annotated[str, Field(min_length=1, max_length=317)]
LabelValue = Annotated[str, Field(max_length=63)]


class SelectorRequirement(KubeModel):
    key: LabelKey = Field(description="The label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="In, NotIn, Exists or DoesNotExist."
    )
    values: list[LabelValue] = Field(
        default_factory=list, max_length=64, description="Values for In and NotIn."
    )


class HostSelector(KubeModel):
    """A label selector over LibvirtHosts, as Kubernetes spells them."""

    match_labels: dict[str, LabelValue] = Field(
        default_factory=dict, max_length=64, description="Labels the host must carry."
    )
    match_expressions: list[SelectorRequirement] = Field(
        default_factory=list, max_length=64, description="Requirements on the host's labels."
    )


class SpreadBy(enum.StrEnum):
    HOST = "Host"
    ZONE = "Zone"


class Placement(KubeModel):
    """Constraints for the placement of a machine created without a host."""

    host_selector: HostSelector | None = Field(
        default=None, description="Only hosts whose LibvirtHost labels match."
    )
    spread_group: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Machines of one group (in one namespace) go to different hosts (or zones) "
        "while that is possible.",
    )
    spread_by: SpreadBy = Field(
        default=SpreadBy.HOST,
        description="Host or Zone (the host's topology.kubernetes.io/zone label).",
    )


class LibvirtMachineSpec(KubeModel):
    """Provider-only settings. Portable intent (size, image, disks, network, power) stays on the
    linked VirtualMachine."""

    # A transition rule on `host` alone cannot see the field being removed.
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(oldSelf.host) || has(self.host)",
                    "message": "host cannot be removed once set",
                }
            ]
        }
    )

    host: HostName | None = Field(
        default=None,
        description="The LibvirtHost whose daemon runs this machine: set by the user to pin the "
        "machine, or by placement. Immutable once set, except to the target a LibvirtMigration's "
        "daemon recorded in status.migration (which only the daemons write); the host label "
        "follows it.",
    )
    placement: Placement | None = Field(
        default=None, description="Constraints for placement when no host is given."
    )
    domain_type: DomainTypeChoice = Field(
        default=DomainTypeChoice.AUTO,
        description="kvm, qemu (software emulation) or auto (kvm when the host offers it).",
    )
    machine_type: str | None = Field(
        default=None,
        pattern=MACHINE_TYPE_PATTERN,
        description="Override of the image's machine type (pc, q35, pc-i440fx-X.Y, pc-q35-X.Y).",
    )
    cpu: CpuSpec | None = Field(default=None, description="Override of the class's CPU mode.")
    firmware: Firmware | None = Field(default=None, description="Override of the image's firmware.")
    console: ConsoleSpec = Field(
        default_factory=ConsoleSpec, description="Serial console and graphics."
    )
    autostart: bool = Field(
        default=False, description="Start the domain when libvirtd starts (host reboot)."
    )
    graceful_shutdown_timeout_seconds: int = Field(
        default=DEFAULT_SHUTDOWN_TIMEOUT_SECONDS,
        ge=1,
        le=3600,
        description="How long a Soft or TrySoft power-off waits for the guest before giving up "
        "(Soft) or forcing it (TrySoft).",
    )
    hotplug: Hotplug | None = Field(default=None, description="Headroom for live resizing.")
    eviction_strategy: Literal["LiveMigrate", "PowerOff", "None"] = Field(
        default="LiveMigrate",
        description="What a drain of its host does with it: LiveMigrate (move it, running, to "
        "another host), PowerOff (power it off and leave it on the host) or None (it blocks the "
        "drain).",
    )


class MachineAddress(Address):
    """A contract address plus where it was learned."""

    source: Literal["lease", "agent", "arp"] | None = None
    """How the address was learned: DHCP lease, guest agent or ARP table."""


class ModifyVolumeStatus(KubeModel):
    """A disk's change of VolumeAttributesClass not (yet) applied, as a PVC's modifyVolumeStatus."""

    target_volume_attributes_class_name: str | None = Field(
        default=None, max_length=253, description="The class the disk is being moved to."
    )
    status: Literal["Pending", "InProgress", "Infeasible"] = Field(
        description="Pending (waits for the machine: suspended, or refused live), InProgress, or "
        "Infeasible (the class cannot be honoured; message says why, the old limits stay)."
    )
    message: str | None = Field(default=None, max_length=1024, description="Why, when known.")


class DiskStatus(KubeModel):
    """One disk's VolumeAttributesClass as applied, as a PVC reports its own."""

    name: str = Field(
        max_length=253, description="The VM's data disk name, or bootDisk for the boot disk."
    )
    current_volume_attributes_class_name: str | None = Field(
        default=None, max_length=253, description="The class whose limits the disk has now."
    )
    modify_volume_status: ModifyVolumeStatus | None = Field(
        default=None, description="A change of class not applied yet; absent when none."
    )


class Preemption(KubeModel):
    """A spot machine preempted by placement: written by the placing daemon, removed by it when
    the machine's host has room again (the host's daemon keeps the machine off meanwhile)."""

    preempted_at: str = Field(
        max_length=64,
        description="When placement preempted the machine (RFC 3339); machines preempted on a "
        "host start again in this order.",
    )
    preempted_for: str | None = Field(
        default=None,
        max_length=512,
        description="namespace/name of the LibvirtMachine (not spot) the room was made for.",
    )


class RestoreHold(KubeModel):
    """A LibvirtRestore holds the machine off while it replaces its disks: written by the
    restore (docs/snapshots.md, "Restore in place"), acknowledged by the machine's controller
    once the machine is off (`held`), removed by the restore when it is done."""

    restore: str = Field(max_length=253, description="The LibvirtRestore's name.")
    uid: str = Field(max_length=64, description="The LibvirtRestore's uid.")
    since: str = Field(max_length=64, description="When the hold was set (RFC 3339).")
    held: bool | None = Field(
        default=None,
        description="Set by the machine's controller once the machine is off and kept off.",
    )


class MachineMigration(KubeModel):
    """The LibvirtMigration moving the machine, written by its source host's daemon when the
    migration is accepted and removed when it ends. It is the machine's lock (one migration at a
    time) and the only host spec.host may change to (CEL on the LibvirtMachine)."""

    name: str = Field(max_length=253, description="The LibvirtMigration, in this namespace.")
    target: str = Field(max_length=253, description="The host it moves the machine to.")


class LibvirtMachineStatus(KubeModel):
    """Written by the controller only. The first six fields are the provider status contract."""

    conditions: list[Condition] | None = Field(
        default=None,
        max_length=16,
        description="InfrastructureReady and UpToDate (contract), keyed by type.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    power_state: str | None = Field(
        default=None,
        max_length=64,
        description="PoweredOn, PoweredOff, Suspended, Paused or Crashed; absent in transition.",
    )
    provider_id: str | None = Field(
        default=None,
        alias="providerID",
        max_length=1024,
        description="Stable id: libvirt://<host>/<domain UUID>.",
    )
    addresses: list[MachineAddress] | None = Field(
        default=None,
        max_length=MAX_REPORTED_ADDRESSES,
        description="Guest addresses per NIC, matched by MAC.",
    )
    provider_metadata: dict[str, Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None,
        max_length=64,
        description="host, domainName and domainUUID; while the domain runs with a guest-agent "
        "channel, guestAgent (connected or disconnected) and, from a connected agent, "
        "guestOSName, guestOSVersion, guestKernel and guestHostName.",
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The LibvirtMachine generation this status describes."
    )
    pending_changes: list[Annotated[str, Field(max_length=1024)]] | None = Field(
        default=None,
        max_length=64,
        description="Accepted changes that wait for the next power cycle.",
    )
    shutdown_requested_at: str | None = Field(
        default=None,
        max_length=64,
        description="When the graceful power-off under way began (RFC 3339); its timeout counts "
        "from here, also across daemon restarts.",
    )
    retained_volumes: list[Annotated[str, Field(max_length=512)]] | None = Field(
        default=None,
        max_length=64,
        description="The machine's volumes (pool/volume) whose disks say deleteOnTermination: "
        "false, as last resolved: deletion keeps these without resolving the spec again.",
    )
    disks: list[DiskStatus] | None = Field(
        default=None,
        max_length=64,
        description="Each disk's VolumeAttributesClass (its I/O limits) and a change under way.",
    )
    preemption: Preemption | None = Field(
        default=None,
        description="Set while the machine (spot) is preempted: kept off until its host has room.",
    )
    restore: RestoreHold | None = Field(
        default=None,
        description="Set while a LibvirtRestore holds the machine off to replace its disks.",
    )
    migration: MachineMigration | None = Field(
        default=None,
        description="Set while a LibvirtMigration moves the machine: its name and target host.",
    )


class MachineMeta(KubeModel):
    """The metadata the resolver needs: identity, and the annotation linking the generic VM."""

    name: SubdomainName
    namespace: str = Field(min_length=1, max_length=63)
    uid: str = Field(min_length=1, max_length=64)
    generation: int | None = None
    annotations: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)


class LibvirtMachine(KubeModel):
    metadata: MachineMeta
    spec: LibvirtMachineSpec = Field(default_factory=LibvirtMachineSpec)
    status: LibvirtMachineStatus | None = None
