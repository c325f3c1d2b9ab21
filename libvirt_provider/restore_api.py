"""The `LibvirtRestore` kind (namespaced, `infrastructure.vm-api.io/v1alpha1`): spec and status.

Why a top-level module: the CRD generator (a lower layer than `snapshot/`) builds its schema from
it, as it does from `snapshot_api`.

A restore rolls one VirtualMachine back to one of its own LibvirtSnapshots, in place: the machine
is held off, each disk the snapshot holds becomes a new overlay on the snapshot's copy under the
disk's own volume name, and the hold is released, so the machine returns to the power state its
VirtualMachine asks for. The spec is the user's and never changes (CEL); the status says where
the restore is, which disks it replaced, and why it waits or failed.
"""

from __future__ import annotations

import enum
from typing import Any

from pydantic import ConfigDict, Field

from catalog.base import KubeModel, ResourceName
from generic.api import Condition
from libvirt_provider import constants as c

__all__ = [
    "LibvirtRestoreSpec",
    "LibvirtRestoreStatus",
    "RestoredDisk",
    "WhenRunning",
]

_IMMUTABLE: dict[str, Any] = {
    "x-kubernetes-validations": [
        {"rule": "self == oldSelf", "message": "a restore's spec is immutable"}
    ]
}


class WhenRunning(enum.StrEnum):
    """What a restore does with a machine that runs: power it off itself (the default), or wait
    until the user powers it off."""

    POWER_OFF = c.RESTORE_WHEN_RUNNING_POWER_OFF
    WAIT = c.RESTORE_WHEN_RUNNING_WAIT


class LibvirtRestoreSpec(KubeModel):
    """Which snapshot onto which machine; immutable after creation."""

    model_config = ConfigDict(**KubeModel.model_config, json_schema_extra=_IMMUTABLE)

    snapshot_name: ResourceName = Field(
        description="The LibvirtSnapshot to restore, in the restore's namespace; it must be a "
        "snapshot of this very machine."
    )
    virtual_machine_name: ResourceName = Field(
        description="The vm-api.io VirtualMachine rolled back, in the restore's namespace."
    )
    when_running: WhenRunning = Field(
        default=WhenRunning.POWER_OFF,
        description="PowerOff: a running machine is powered off for the restore (gracefully, "
        "within its shutdown timeout) and started again after. WaitForPowerOff: the restore "
        "waits until the user powers it off.",
    )


class RestoredDisk(KubeModel):
    """One disk whose content became the snapshot's."""

    name: str = Field(max_length=63, description="bootDisk, or the data disk's name.")
    pool: str = Field(max_length=255, description="The pool of the machine's volume.")
    volume: str = Field(max_length=255, description="The machine's volume, made anew.")
    backing_volume: str = Field(
        max_length=4096, description="The snapshot's copy the volume is now an overlay on."
    )


class LibvirtRestoreStatus(KubeModel):
    """Written by the controller only."""

    phase: str | None = Field(
        default=None,
        max_length=32,
        description="Pending, WaitingForPowerOff, PoweringOff, Restoring, Succeeded or Failed.",
    )
    start_time: str | None = Field(
        default=None,
        max_length=64,
        description="When the machine was first held for the restore (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    completion_time: str | None = Field(
        default=None,
        max_length=64,
        description="When the restore succeeded or failed (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    host: str | None = Field(default=None, max_length=253, description="The machine's host.")
    machine_uid: str | None = Field(
        default=None, max_length=64, description="The LibvirtMachine restored (its domain UUID)."
    )
    power_state_before: str | None = Field(
        default=None,
        max_length=32,
        description="The machine's power state when the restore took it (Running or Off).",
    )
    return_power_state: str | None = Field(
        default=None,
        max_length=32,
        description="The power state the machine returns to: what its VirtualMachine asks.",
    )
    restored_disks: list[RestoredDisk] | None = Field(
        default=None, max_length=64, description="The disks replaced so far, then all of them."
    )
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=8,
        description="Succeeded: True once restored; otherwise its reason says where the restore "
        "is or why not (InProgress, WaitingForPowerOff, SnapshotNotFound, SnapshotNotReady, "
        "SnapshotOfAnotherMachine, MachineNotFound, MachineNotBuilt, UnsupportedDisk, "
        "AnotherRestoreInProgress, HostUnreachable, RestoreFailed).",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The generation this status describes."
    )
