"""The `LibvirtMigration` kind (namespaced, `infrastructure.vm-api.io/v1alpha1`): spec and status.

Why a top-level module: the CRD generator (a lower layer than `migration/`) builds its schema
from it, as it does from `snapshot_api`.

The spec is the user's and never changes once created (CEL): which LibvirtMachine, and where to.
The status is the daemons': the phase, the hosts, what the target prepared, the progress the
source reads from libvirt while the job runs and, afterwards, what libvirt measured.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

from pydantic import ConfigDict, Field

from catalog.base import KubeModel, ResourceName
from generic.api import Condition
from libvirt_provider import constants as c

__all__ = [
    "LibvirtMigrationSpec",
    "LibvirtMigrationStatus",
    "MigrationPhase",
    "MigrationProgress",
    "MigrationResult",
    "PreparedVolume",
]

HostName = Annotated[
    str, Field(min_length=1, max_length=c.HOST_NAME_MAX_LENGTH, pattern=c.HOST_NAME_PATTERN)
]

_IMMUTABLE: dict[str, Any] = {
    "x-kubernetes-validations": [
        {"rule": "self == oldSelf", "message": "a migration's spec is immutable"}
    ]
}


class MigrationPhase(enum.StrEnum):
    PENDING = c.MIGRATION_PHASE_PENDING
    SCHEDULING = c.MIGRATION_PHASE_SCHEDULING
    PREPARING = c.MIGRATION_PHASE_PREPARING
    MIGRATING = c.MIGRATION_PHASE_MIGRATING
    SUCCEEDED = c.MIGRATION_PHASE_SUCCEEDED
    FAILED = c.MIGRATION_PHASE_FAILED
    CANCELLED = c.MIGRATION_PHASE_CANCELLED


class LibvirtMigrationSpec(KubeModel):
    """Which machine goes where; immutable after creation."""

    model_config = ConfigDict(**KubeModel.model_config, json_schema_extra=_IMMUTABLE)

    machine_name: ResourceName = Field(
        description="The LibvirtMachine to move, in the migration's namespace. It must run."
    )
    target_host: HostName | None = Field(
        default=None,
        description="The LibvirtHost to move it to. Absent: the least loaded other host that "
        "placement's filters for a new machine admit and that has the machine's networks and "
        "pools (NoTargetHost when none does).",
    )
    auto_converge: bool = Field(
        default=False,
        description="Let qemu slow the guest's vCPUs down when its memory is dirtied faster "
        "than it is sent (libvirt's VIR_MIGRATE_AUTO_CONVERGE), so that a busy guest's copy "
        "converges before its deadline.",
    )


class PreparedVolume(KubeModel):
    """A volume the target's daemon made for the machine before the copy."""

    pool: str = Field(max_length=255, description="The pool on the target.")
    volume: str = Field(max_length=255, description="The volume's name (as on the source).")
    path: str = Field(max_length=4096, description="Its path on the target.")


class MigrationProgress(KubeModel):
    """The source's job statistics while the copy runs (libvirt's jobStats), in bytes."""

    memory_total: int | None = Field(default=None, ge=0, description="Bytes of guest memory.")
    memory_processed: int | None = Field(
        default=None, ge=0, description="Bytes of memory sent so far."
    )
    memory_remaining: int | None = Field(
        default=None, ge=0, description="Bytes of memory still to send."
    )
    disk_total: int | None = Field(
        default=None,
        ge=0,
        description="Bytes of the machine's own disk data to copy (the image is not copied).",
    )
    disk_processed: int | None = Field(
        default=None, ge=0, description="Bytes of disk data copied so far."
    )
    disk_remaining: int | None = Field(
        default=None, ge=0, description="Bytes of disk data still to copy."
    )
    memory_bandwidth: int | None = Field(
        default=None, ge=0, description="Bytes per second the memory is sent at."
    )
    iterations: int | None = Field(default=None, ge=0, description="Memory passes so far.")
    elapsed_milliseconds: int | None = Field(
        default=None, ge=0, description="Milliseconds since the job began."
    )


class MigrationResult(KubeModel):
    """What libvirt measured of the finished job: time and downtime from the target's record,
    bytes of disk from the source's last report (the target's record has none)."""

    elapsed_milliseconds: int | None = Field(
        default=None, ge=0, description="Milliseconds since the job began."
    )
    downtime_milliseconds: int | None = Field(
        default=None, ge=0, description="Milliseconds the guest was paused for the switch-over."
    )
    memory_total: int | None = Field(default=None, ge=0, description="Bytes of guest memory.")
    memory_processed: int | None = Field(
        default=None, ge=0, description="Bytes of memory sent so far."
    )
    disk_total: int | None = Field(
        default=None,
        ge=0,
        description="Bytes of the machine's own disk data to copy (the image is not copied).",
    )
    disk_processed: int | None = Field(
        default=None, ge=0, description="Bytes of disk data copied so far."
    )


class LibvirtMigrationStatus(KubeModel):
    """Written by the daemons only: the source's and the target's, each its own steps."""

    phase: MigrationPhase | None = Field(
        default=None,
        description="Pending, Scheduling, Preparing, Migrating, Succeeded, Failed or Cancelled.",
    )
    source: str | None = Field(
        default=None, max_length=253, description="The host the machine ran on."
    )
    target: str | None = Field(default=None, max_length=253, description="Where it goes.")
    machine_uid: str | None = Field(
        default=None, max_length=64, description="The machine's uid (its domain's UUID)."
    )
    start_time: str | None = Field(
        default=None,
        max_length=64,
        description="When the source accepted it (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    slot_claimed_at: str | None = Field(
        default=None,
        max_length=64,
        description="While Pending: when the source claimed one of the cluster's migration "
        "slots for it, a moment before counting the running migrations again (RFC 3339); "
        "cleared when it starts or waits.",
        json_schema_extra={"format": "date-time"},
    )
    completion_time: str | None = Field(
        default=None,
        max_length=64,
        description="When it ended: Succeeded, Failed or Cancelled (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    target_uri: str | None = Field(
        default=None,
        max_length=1024,
        description="The target libvirtd's migration address (qemu+tls://...), as its daemon "
        "was told by --migration-uri.",
    )
    prepared_volumes: list[PreparedVolume] | None = Field(
        default=None,
        max_length=64,
        description="The volumes the target made for the machine (empty overlays over its own "
        "copy of the image, blank data disks, the cloud-init medium): the copy goes there.",
    )
    target_cleaned: bool | None = Field(
        default=None,
        description="True once a migration that did not succeed left nothing on the target.",
    )
    handed_over: bool | None = Field(
        default=None,
        description="True once the domain runs on the target and the machine names it as its "
        "host; the target's daemon then records the result.",
    )
    progress: MigrationProgress | None = Field(
        default=None, description="While the copy runs: the source's job statistics."
    )
    result: MigrationResult | None = Field(
        default=None, description="Afterwards: what libvirt measured of the job."
    )
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=8,
        description="Succeeded: True once the machine runs on the target; otherwise its reason "
        "says where the migration is or why it failed.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
