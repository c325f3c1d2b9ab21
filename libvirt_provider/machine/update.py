"""Bringing an existing domain to a changed spec, and making the volumes a machine needs.

A pass of the reconciler that finds the machine's domain hands it here: volumes the spec added are
created, disks grown, and the definition compared with the desired one. Everything is applied at
once while the domain is off (after the cloud-init volume is rewritten if its data changed); while
it runs, what libvirt can change live is applied (`domainxml.live_update` picks the steps) and the
rest is returned as pending, for UpToDate=False/RequiresPowerOff until the next power cycle. A
change libvirt refuses live joins the pending ones, with a Warning Event the first time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.domainxml import (
    DISK_ALIAS_PREFIX,
    AttachDevice,
    Change,
    DetachDevice,
    DeviceAction,
    DeviceEdit,
    LiveStep,
    SetBlockIoTune,
    SetMemory,
    SetMetadata,
    SetVcpus,
    differences,
    owned_fields,
    plan_live_update,
    render_domain_xml,
)
from libvirt_provider.driver.base import Hypervisor
from libvirt_provider.driver.types import DomainState, DomainStatus, OverlaySpec, VolumeInfo
from libvirt_provider.errors import NotFoundError, PermanentError, ProviderError, StateConflictError
from libvirt_provider.images.importer import ImageImporter
from libvirt_provider.machine.store import EventSink
from libvirt_provider.resolve.cloudinit import build_cidata_iso
from libvirt_provider.resolve.storage import GIB
from libvirt_provider.resolved import ResolvedMachine, VolumePlan

__all__ = ["DomainUpdater", "UpdateOutcome", "create_volume", "ensure_volume"]

Obj = Mapping[str, Any]

# States in which libvirt changes a domain's devices and sizes live.
_LIVE_STATES = frozenset({DomainState.RUNNING, DomainState.BLOCKED, DomainState.PAUSED})
# Failures that mean "not live, not now"; an unreachable libvirt (RetryableError) fails the pass.
_REFUSED = (PermanentError, StateConflictError, NotFoundError)


@dataclass
class UpdateOutcome:
    # Changes accepted but not applied: they wait for the next power cycle.
    pending: list[str] = field(default_factory=list)
    # Set when a volume the spec added cannot be made yet: the definition waits with it.
    waiting_for_image: str | None = None
    # Disks (resolved names: boot, data-<name>) whose new I/O limits were not applied this pass.
    limits_pending: set[str] = field(default_factory=set)


def ensure_volume(hv: Hypervisor, volume: VolumePlan) -> bool:
    """Create the volume if missing; True if this call did."""
    if hv.find_volume(volume.pool, volume.volume) is not None:
        return False
    create_volume(hv, volume)
    return True


def create_volume(hv: Hypervisor, volume: VolumePlan) -> None:
    """A new volume for `volume`: blank, or an overlay on its base grown to the planned size."""
    if volume.base is None:
        hv.create_blank(
            pool=volume.pool,
            name=volume.volume,
            capacity_bytes=volume.capacity_bytes,
            format=volume.format.value,
        )
        return
    base = hv.find_volume(volume.base.pool, volume.base.volume)
    if base is None:
        raise PermanentError(
            f"{volume.base.label} is not in pool {volume.base.pool!r} on this host "
            f"(expected volume {volume.base.volume!r})"
        )
    if base.capacity_bytes > volume.capacity_bytes:
        # The overlay would have to be as large as its base, beyond what the disk asks and what
        # allocation and the pool's free space count for it: refused, never silently grown.
        raise PermanentError(
            f"{volume.base.label} has a virtual size of "
            f"{_gib(base.capacity_bytes)} GiB, more than disk {volume.disk!r} asks "
            f"({_gib(volume.capacity_bytes)} GiB): set its sizeGiB to at least "
            f"{-(-base.capacity_bytes // GIB)}"
        )
    hv.create_overlay(
        OverlaySpec(
            pool=volume.pool,
            name=volume.volume,
            backing_path=base.path,
            backing_format=volume.base.format.value,
            capacity_bytes=volume.capacity_bytes,
        )
    )


def _limited_disks(changes: Iterable[Change]) -> set[str]:
    """The disks (resolved names) among `changes` whose I/O limits change."""
    return {
        change.key.device.removeprefix(DISK_ALIAS_PREFIX)
        for change in changes
        if isinstance(change.key, DeviceEdit) and change.key.action is DeviceAction.IO_LIMITS
    }


def _gib(size: int) -> str:
    return f"{size / GIB:.2f}".rstrip("0").rstrip(".")


class DomainUpdater:
    def __init__(self, *, hypervisor: Hypervisor, events: EventSink, images: ImageImporter) -> None:
        self._hv = hypervisor
        self._events = events
        self._images = images

    def update(
        self,
        obj: Obj,
        uuid: str,
        plan: ResolvedMachine,
        status: DomainStatus,
        *,
        current: str | None = None,
    ) -> UpdateOutcome:
        """One pass over the machine `obj` whose domain `uuid` exists and is in `status`;
        `current` is its inactive definition when the caller has read it this pass."""
        outcome = UpdateOutcome()
        existing = self._ensure_added_volumes(obj, plan, outcome)
        if existing is not None:
            self._grow_disks(obj, uuid, plan=plan, status=status, volumes=existing, out=outcome)
            self._update_definition(obj, uuid, plan, status, outcome, current=current)
        return outcome

    def _ensure_added_volumes(
        self, obj: Obj, plan: ResolvedMachine, out: UpdateOutcome
    ) -> list[tuple[VolumePlan, VolumeInfo]] | None:
        """Create the volumes a changed spec added (data disks, cloud-init media) before the
        definition names them. Returns the volumes that were already there, or None while one
        still waits for its image."""
        existing: list[tuple[VolumePlan, VolumeInfo]] = []
        for volume in plan.volumes:
            info = self._hv.find_volume(volume.pool, volume.volume)
            if info is not None:
                existing.append((volume, info))
                continue
            if volume.base is not None and not self._images.ensure(volume.base).ready:
                out.waiting_for_image = f"disk {volume.volume} waits for {volume.base.label}"
                return None
            # Made at its planned size (an overlay at least its base's): nothing to grow.
            create_volume(self._hv, volume)
            self._events.event(
                obj, reason=c.EVENT_VOLUME_CREATED, message=f"created {volume.pool}/{volume.volume}"
            )
        ci = plan.cloud_init
        if ci is not None and self._hv.find_volume(ci.pool, ci.volume) is None:
            self._hv.upload_volume(pool=ci.pool, name=ci.volume, data=build_cidata_iso(ci))
        return existing

    def _grow_disks(
        self,
        obj: Obj,
        uuid: str,
        *,
        plan: ResolvedMachine,
        status: DomainStatus,
        volumes: list[tuple[VolumePlan, VolumeInfo]],
        out: UpdateOutcome,
    ) -> None:
        """sizeGiB only grows: online through qemu when the domain runs, else on the volume."""
        running = status.state is not DomainState.SHUTOFF
        targets = {(d.pool, d.volume): d.target for d in plan.domain.disks}
        for volume, info in volumes:
            if volume.capacity_bytes <= info.capacity_bytes:
                continue
            target = targets.get((volume.pool, volume.volume))
            if running and target is not None:
                try:
                    self._hv.grow_attached_disk(
                        uuid, target=target, capacity_bytes=volume.capacity_bytes
                    )
                except _REFUSED as err:
                    # The volume grows while the domain is off instead.
                    self._refused(
                        obj, out, f"disk {volume.volume} to {volume.capacity_bytes} bytes", err
                    )
                    continue
            else:
                self._hv.grow_volume(
                    pool=volume.pool, name=volume.volume, capacity_bytes=volume.capacity_bytes
                )
            self._events.event(
                obj,
                reason=c.EVENT_DISK_GROWN,
                message=f"grew {volume.volume} from {info.capacity_bytes} to "
                f"{volume.capacity_bytes} bytes" + (" while running" if running else ""),
            )

    def _update_definition(
        self,
        obj: Obj,
        uuid: str,
        plan: ResolvedMachine,
        status: DomainStatus,
        out: UpdateOutcome,
        *,
        current: str | None,
    ) -> None:
        desired = render_domain_xml(plan.domain)
        if current is None:
            current = self._hv.domain_xml(uuid, inactive=True)
        if status.state is DomainState.SHUTOFF and not status.has_managed_save:
            changes = differences(current, desired)
            if changes:
                self._refresh_cloud_init(plan, current)
                self._hv.define(desired)
                self._drop_unused_cloud_init(plan, current)
                self._events.event(
                    obj, reason=c.EVENT_REDEFINED, message="applied: " + "; ".join(changes)
                )
            return
        live = plan_live_update(current, desired)
        if status.state not in _LIVE_STATES or status.has_managed_save:
            # A saved (suspended) domain resumes with the hardware it was saved with.
            out.pending.extend([str(c) for c, _ in live.steps] + [str(c) for c in live.deferred])
            out.limits_pending.update(_limited_disks(c for c, _ in live.steps))
            return
        applied: list[str] = []
        for change, step in live.steps:
            try:
                self._apply_live(uuid, step)
            except _REFUSED as err:
                self._refused(obj, out, str(change), err)
                out.limits_pending.update(_limited_disks([change]))
            else:
                applied.append(str(change))
        if applied:
            self._events.event(
                obj,
                reason=c.EVENT_UPDATED_LIVE,
                message="applied while running: " + "; ".join(applied),
            )
        out.pending.extend(str(c) for c in live.deferred)

    def _refused(self, obj: Obj, out: UpdateOutcome, change: str, err: ProviderError) -> None:
        """A change libvirt refused to apply live waits for the power cycle; warned of once."""
        message = f"{change} (could not be applied live: {err})"
        out.pending.append(message)
        if message not in ((obj.get("status") or {}).get("pendingChanges") or []):
            self._events.event(
                obj, reason=c.EVENT_LIVE_UPDATE_FAILED, message=message, warning=True
            )

    def _apply_live(self, uuid: str, step: LiveStep) -> None:
        match step:
            case SetVcpus(count=count):
                self._hv.set_vcpus(uuid, count)
            case SetMemory(kib=kib):
                self._hv.set_memory(uuid, kib)
            case AttachDevice(xml=xml):
                self._hv.attach_device(uuid, xml)
            case DetachDevice(xml=xml):
                self._hv.detach_device(uuid, xml)
            case SetMetadata(xml=xml):
                self._hv.set_metadata(uuid, xml)
            case SetBlockIoTune(target=target, parameters=parameters):
                self._hv.set_block_io_tune(uuid, target, dict(parameters))

    def _refresh_cloud_init(self, plan: ResolvedMachine, current: str) -> None:
        """Rewrite the cloud-init volume when its data changed: the guest reads it at next boot."""
        ci, media = plan.cloud_init, plan.domain.cloud_init
        if ci is None or media is None:
            return
        if owned_fields(current).ownership.cloud_init_digest == media.digest:
            return
        with contextlib.suppress(NotFoundError):
            self._hv.delete_volume(ci.pool, ci.volume)
        self._hv.upload_volume(pool=ci.pool, name=ci.volume, data=build_cidata_iso(ci))

    def _drop_unused_cloud_init(self, plan: ResolvedMachine, previous: str) -> None:
        """A spec that no longer asks for cloud-init leaves its old volume unused: remove it."""
        cdrom = owned_fields(previous).cloud_init
        if plan.cloud_init is not None or cdrom is None or not cdrom.pool or not cdrom.volume:
            return
        if cdrom.volume.startswith(f"{plan.domain.name}--"):
            with contextlib.suppress(NotFoundError):
                self._hv.delete_volume(cdrom.pool, cdrom.volume)
