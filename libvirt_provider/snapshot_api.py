"""The `LibvirtSnapshot` kind (namespaced, `infrastructure.vm-api.io/v1alpha1`): spec and status.

Why a top-level module: the CRD generator (a lower layer than `snapshot/`) builds its schema from
it, as it does from `host_api`.

The spec is the user's and never changes once created (CEL): which VirtualMachine, which of its
disks, which consistency. The status is the controller's: whether the copy is complete and usable
(`readyToUse`), where its volumes are and what they cost, what consistency was achieved, and the
machine's spec at the instant it was taken, so that a restore knows what it restores.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

from pydantic import ConfigDict, Field

from catalog.base import KubeModel, ResourceName
from generic.api import Condition
from libvirt_provider.constants import SNAPSHOT_BOOT_DISK

__all__ = [
    "Consistency",
    "LibvirtSnapshotSpec",
    "LibvirtSnapshotStatus",
    "SnapshotDisk",
    "SnapshotSource",
]

_IMMUTABLE: dict[str, Any] = {
    "x-kubernetes-validations": [
        {"rule": "self == oldSelf", "message": "a snapshot's spec is immutable"}
    ]
}
_DISK_NAME = r"^(bootDisk|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$"


class Consistency(enum.StrEnum):
    """`Crash`: the disks as a power cut would leave them. `Filesystem`: the guest's file systems
    frozen by the qemu guest agent for the copy's instant. `Auto`: Filesystem when the agent
    answers, else Crash."""

    CRASH = "Crash"
    FILESYSTEM = "Filesystem"
    AUTO = "Auto"


class LibvirtSnapshotSpec(KubeModel):
    """What to copy; immutable after creation."""

    model_config = ConfigDict(**KubeModel.model_config, json_schema_extra=_IMMUTABLE)

    virtual_machine_name: ResourceName = Field(
        description="The vm-api.io VirtualMachine to copy, in the snapshot's namespace."
    )
    disks: list[Annotated[str, Field(min_length=1, max_length=63, pattern=_DISK_NAME)]] | None = (
        Field(
            default=None,
            min_length=1,
            max_length=64,
            description=f"The disks to copy: {SNAPSHOT_BOOT_DISK} for the boot disk, a data disk "
            "by its name. Absent: every disk, the boot disk included.",
            json_schema_extra={"x-kubernetes-list-type": "set"},
        )
    )
    consistency: Consistency = Field(
        default=Consistency.AUTO,
        description="Crash, Filesystem (the guest agent freezes the file systems for the copy's "
        "instant; a machine without an answering agent waits with GuestAgentUnavailable) or Auto "
        "(Filesystem when the agent answers, else Crash).",
    )


class SnapshotDisk(KubeModel):
    """One copied disk: its name in the VM, its volume, and what it costs."""

    name: str = Field(max_length=63, description="bootDisk, or the data disk's name.")
    pool: str = Field(max_length=255, description="The storage pool holding the copy.")
    volume: str = Field(max_length=255, description="The copy's volume (snap-<uid>-...).")
    size_bytes: int = Field(ge=0, description="The disk's size as the guest sees it.")
    allocated_bytes: int = Field(
        ge=0, description="Bytes the copy takes in the pool: what the machine wrote."
    )
    backing_volume: str | None = Field(
        default=None,
        max_length=4096,
        description="The image the copy is an overlay on (a path in the pool), if any.",
    )


class SnapshotSource(KubeModel):
    """The machine the snapshot was taken from, as it was at that instant."""

    virtual_machine: str = Field(max_length=253, description="The VirtualMachine's name.")
    virtual_machine_uid: str = Field(max_length=64, description="Its uid (survives its deletion).")
    machine: str = Field(max_length=253, description="The LibvirtMachine's name.")
    machine_uid: str = Field(
        max_length=64, description="Its uid, which is its domain's UUID on the host."
    )
    power_state: str = Field(max_length=64, description="Running or Stopped, when taken.")
    spec: dict[str, Any] = Field(
        description="The VirtualMachine's spec when the snapshot was taken.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    machine_spec: dict[str, Any] | None = Field(
        default=None,
        description="The LibvirtMachine's spec when the snapshot was taken.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class LibvirtSnapshotStatus(KubeModel):
    """Written by the controller only."""

    ready_to_use: bool | None = Field(
        default=None, description="True once every disk's copy is complete and usable."
    )
    creation_time: str | None = Field(
        default=None,
        max_length=64,
        description="The instant the disks were copied (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    host: str | None = Field(
        default=None, max_length=253, description="The host holding the snapshot's volumes."
    )
    consistency: Consistency | None = Field(
        default=None, description="The consistency achieved: Crash or Filesystem."
    )
    disks: list[SnapshotDisk] | None = Field(
        default=None, max_length=64, description="Each copied disk: its volume and its size."
    )
    size_bytes: int | None = Field(
        default=None, ge=0, description="Bytes all copies take in their pools."
    )
    pools: list[Annotated[str, Field(max_length=255)]] | None = Field(
        default=None,
        max_length=64,
        description="The pools the snapshot's volumes are (or are being) made in: deletion "
        "looks there, even for an attempt that never finished.",
    )
    source: SnapshotSource | None = Field(
        default=None, description="The machine the snapshot was taken from, as it was then."
    )
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=8,
        description="Ready: True once the snapshot is usable; otherwise its reason says why not "
        "(InProgress, SourceNotFound, SourceNotLinked, SourceNotBuilt, UnknownDisk, "
        "HostUnreachable, PoolFull, GuestAgentUnavailable, SnapshotFailed; InUse while a deletion "
        "waits for the clones built on it).",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The generation this status describes."
    )
