"""Images, snapshots, storage classes and pools, and the volumes of the boot and data disks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from catalog.image import ImageFormat, LibvirtImage
from catalog.lookup import AmbiguousDefaultError
from catalog.snapshot_source import SnapshotDiskSource
from catalog.storage import LibvirtStorageClassSpec
from generic.api import BootDisk, ObjectReference
from generic.api import Disk as VmDisk
from libvirt_provider.constants import (
    IMAGE_KIND,
    REASON_AMBIGUOUS_DEFAULT,
    REASON_INVALID_SPEC,
    REASON_NOT_AVAILABLE_ON_HOST,
    REASON_REFERENCE_NOT_FOUND,
    REASON_SNAPSHOT_NOT_READY,
    SNAPSHOT_BOOT_DISK,
    SNAPSHOT_KIND,
    VOLUME_ATTRIBUTES_DRIVER,
)
from libvirt_provider.images.names import base_volume_name, parse_cached_name
from libvirt_provider.naming import is_machine_volume, volume_name
from libvirt_provider.resolve.context import VM, Context, check_reference
from libvirt_provider.resolve.iotune import parse_iotune
from libvirt_provider.resolve.refusals import NO_BOOT_DISK
from libvirt_provider.resolved import BaseImage, IoTune, VolumePlan

GIB = 2**30


@dataclass
class _Placement:
    """Where a disk volume lives."""

    pool: str
    storage: LibvirtStorageClassSpec | None


def resolve_image(ctx: Context, ref: ObjectReference, where: str) -> LibvirtImage | None:
    if not check_reference(ctx, ref, IMAGE_KIND, where):
        return None
    image = ctx.catalog.images.get(ref.name)
    if image is None:
        ctx.problem(REASON_REFERENCE_NOT_FOUND, where, f"LibvirtImage {ref.name!r} not found")
    return image


def resolve_storage(ctx: Context, class_name: str | None, where: str) -> _Placement | None:
    if class_name is None:
        try:
            storage = ctx.catalog.default_storage_class()
        except AmbiguousDefaultError as error:
            ctx.problem(REASON_AMBIGUOUS_DEFAULT, where, str(error))
            return None
        if storage is None:
            ctx.problem(
                REASON_REFERENCE_NOT_FOUND,
                where,
                "no storageClassName is given and no LibvirtStorageClass is marked default",
            )
            return None
    else:
        storage = ctx.catalog.storage_classes.get(class_name)
        if storage is None:
            ctx.problem(
                REASON_REFERENCE_NOT_FOUND,
                f"{where}.storageClassName",
                f"storage class {class_name!r} has no LibvirtStorageClass",
            )
            return None
    pool = storage.spec.pool_on(ctx.host.hostname)
    if not _pool_on_host(ctx, pool, where):
        return None
    return _Placement(pool=pool, storage=storage.spec)


def _pool_on_host(ctx: Context, pool: str, where: str) -> bool:
    if pool in ctx.host.pools:
        return True
    ctx.problem(
        REASON_NOT_AVAILABLE_ON_HOST,
        where,
        f"storage pool {pool!r} does not exist on host {ctx.host.hostname!r}",
        missing=f"pool {pool}",
    )
    return False


def resolve_base_image(
    ctx: Context, *, image: LibvirtImage, pool: str, where: str
) -> BaseImage | None:
    source = image.spec.source
    fmt = image.spec.format
    if source.volume is not None:
        if not _pool_on_host(ctx, source.volume.pool, where):
            return None
        if is_machine_volume(source.volume.volume) or parse_cached_name(source.volume.volume):
            # A catalog object must not reach another machine's disks (or the cache's bases,
            # which the image cache may delete): images name volumes put there for the purpose.
            ctx.problem(
                REASON_INVALID_SPEC,
                f"LibvirtImage {image.metadata.name}.spec.source.volume",
                f"volume {source.volume.volume!r} belongs to a machine or to the image cache; "
                "an image must name a volume of its own",
            )
            return None
        return BaseImage(
            image=image.metadata.name,
            pool=source.volume.pool,
            volume=source.volume.volume,
            format=fmt,
        )
    assert source.http is not None  # exactly one, by the model
    # One cached base per content checksum, shared by every machine that uses the image.
    return BaseImage(
        image=image.metadata.name,
        pool=pool,
        volume=base_volume_name(source.http.sha256, fmt.value),
        format=fmt,
        url=str(source.http.url),
        sha256=source.http.sha256,
        max_bytes=source.http.max_size_gib * GIB,
    )


def resolve_snapshot_base(
    ctx: Context,
    disk: BootDisk | VmDisk,
    *,
    disk_name: str | None,
    volume: tuple[str, str],
    where: str,
) -> BaseImage | None:
    """The snapshot copy a disk with `source.snapshot` is an overlay on (a clone).

    Which copy: the boot disk takes the snapshot's boot disk; a data disk takes the snapshot's
    disk of the same name, else the snapshot's only data disk; anything else is a problem that
    lists the disks the snapshot holds. The snapshot must be in the machine's namespace (the
    reference has no namespace), complete, not being deleted, and on the host resolved for. A
    disk already made (`volume` in the machine's definition) does not wait for a snapshot being
    deleted: the snapshot keeps its copies while they are used.
    """
    ref = disk.source.snapshot
    assert ref is not None
    where = f"{where}.source.snapshot"
    if not check_reference(ctx, ref, SNAPSHOT_KIND, where):
        return None
    namespace = ctx.machine.metadata.namespace
    snap = ctx.catalog.snapshots.get((namespace, ref.name))
    if snap is None:
        ctx.problem(
            REASON_REFERENCE_NOT_FOUND,
            where,
            f"LibvirtSnapshot {ref.name!r} not found in namespace {namespace!r}",
        )
        return None
    built = volume in ctx.existing_volumes
    if (snap.deleting and not built) or not snap.ready:
        state = "is being deleted" if snap.deleting else "is not ready yet (readyToUse is not true)"
        ctx.problem(REASON_SNAPSHOT_NOT_READY, where, f"LibvirtSnapshot {ref.name!r} {state}")
        return None
    copy = _snapshot_disk(ctx, snap.disks, disk_name=disk_name, snapshot=ref.name, where=where)
    if copy is None:
        return None
    if snap.host != ctx.host.hostname:
        ctx.problem(
            REASON_NOT_AVAILABLE_ON_HOST,
            where,
            f"LibvirtSnapshot {ref.name!r} is on host {snap.host!r}, not on "
            f"{ctx.host.hostname!r}: a clone is built on its snapshot's host",
            missing=f"snapshot {ref.name}",
        )
        return None
    if not _pool_on_host(ctx, copy.pool, where):
        return None
    if copy.size_bytes > disk.size_gi_b * GIB:
        ctx.problem(
            REASON_INVALID_SPEC,
            where,
            f"the snapshot's disk is {copy.size_bytes} bytes, more than sizeGiB "
            f"{disk.size_gi_b}: set sizeGiB to at least {-(-copy.size_bytes // GIB)}",
        )
        return None
    return BaseImage(
        image=ref.name,
        pool=copy.pool,
        volume=copy.volume,
        format=ImageFormat(copy.format),
        snapshot=True,
    )


def _snapshot_disk(
    ctx: Context,
    disks: Mapping[str, SnapshotDiskSource],
    *,
    disk_name: str | None,
    snapshot: str,
    where: str,
) -> SnapshotDiskSource | None:
    """Which of the snapshot's disks a disk is cloned from (see `resolve_snapshot_base`)."""
    if disk_name is None:
        found = disks.get(SNAPSHOT_BOOT_DISK)
        wanted = f"no {SNAPSHOT_BOOT_DISK}"
    else:
        found = disks.get(disk_name)
        data = [d for name, d in disks.items() if name != SNAPSHOT_BOOT_DISK]
        if found is None and len(data) == 1:
            found = data[0]
        wanted = f"no disk {disk_name!r} and not exactly one data disk"
    if found is None:
        ctx.problem(
            REASON_INVALID_SPEC,
            where,
            f"LibvirtSnapshot {snapshot!r} holds {wanted} (it holds: "
            f"{', '.join(sorted(disks)) or 'none'})",
        )
    return found


def resolve_disk_limits(ctx: Context) -> dict[str, tuple[str | None, IoTune]]:
    """Each disk's VolumeAttributesClass and the limits it asks for, by the disk's device name
    (`boot`, `data-<name>`); a disk whose class cannot be honoured is a problem and left out."""
    disks: list[tuple[str, BootDisk | VmDisk, str]] = []
    if ctx.vm.boot_disk is not None:
        disks.append(("boot", ctx.vm.boot_disk, f"{VM}.spec.bootDisk"))
    disks.extend((f"data-{d.name}", d, f"{VM}.spec.disks[{d.name}]") for d in ctx.vm.disks or ())
    limits: dict[str, tuple[str | None, IoTune]] = {}
    for device, disk, where in disks:
        name = disk.volume_attributes_class_name
        if name is None:
            limits[device] = (None, IoTune())
            continue
        iotune = _class_limits(ctx, name, f"{where}.volumeAttributesClassName")
        if iotune is not None:
            limits[device] = (name, iotune)
    return limits


def _class_limits(ctx: Context, name: str, where: str) -> IoTune | None:
    vac = ctx.catalog.volume_attributes_classes.get(name)
    if vac is None:
        ctx.problem(REASON_REFERENCE_NOT_FOUND, where, f"VolumeAttributesClass {name!r} not found")
        return None
    if vac.driver_name != VOLUME_ATTRIBUTES_DRIVER:
        ctx.problem(
            REASON_INVALID_SPEC,
            where,
            f"VolumeAttributesClass {name!r} is for driver {vac.driver_name!r}, not for this "
            f"provider's {VOLUME_ATTRIBUTES_DRIVER!r}",
        )
        return None
    iotune, problems = parse_iotune(vac)
    for problem in problems:
        ctx.problem(REASON_INVALID_SPEC, where, f"VolumeAttributesClass {name!r} {problem}")
    return iotune


def resolve_boot_disk(ctx: Context) -> tuple[LibvirtImage, VolumePlan] | None:
    where = f"{VM}.spec.bootDisk"
    boot = ctx.vm.boot_disk
    if boot is None:
        ctx.unsupported(where, NO_BOOT_DISK)
        return None
    if boot.source.snapshot is not None:
        image = _snapshot_boot_image(ctx, boot.source.snapshot, f"{where}.source.snapshot")
        placement = resolve_storage(ctx, boot.storage_class_name, where)
        made = (
            placement.pool if placement else "",
            volume_name(ctx.domain, "boot", extension="qcow2"),
        )
        base = resolve_snapshot_base(ctx, boot, disk_name=None, volume=made, where=where)
        if image is None or placement is None or base is None:
            return None
    else:
        if boot.source.image is None:
            return None
        image = resolve_image(ctx, boot.source.image, f"{where}.source.image")
        placement = resolve_storage(ctx, boot.storage_class_name, where)
        if image is None or placement is None:
            return None
        base = resolve_base_image(
            ctx, image=image, pool=placement.pool, where=f"{where}.source.image"
        )
        if base is None:
            return None
    plan = VolumePlan(
        disk="boot",
        pool=placement.pool,
        volume=volume_name(ctx.domain, "boot", extension="qcow2"),
        format=ImageFormat.QCOW2,
        capacity_bytes=boot.size_gi_b * GIB,
        base=base,
        delete_on_termination=boot.delete_on_termination,
    )
    return image, plan


def _snapshot_boot_image(ctx: Context, ref: ObjectReference, where: str) -> LibvirtImage | None:
    """The image a cloned boot disk's guest comes from: the one the snapshot's machine booted
    (its firmware, machine type and buses are the guest's, whatever disk it boots from)."""
    snap = ctx.catalog.snapshots.get((ctx.machine.metadata.namespace, ref.name))
    if snap is None or snap.boot_image is None:
        return None  # the base's resolution says why (not found, not ready, no boot disk)
    image = ctx.catalog.images.get(snap.boot_image)
    if image is None:
        ctx.problem(
            REASON_REFERENCE_NOT_FOUND,
            where,
            f"LibvirtImage {snap.boot_image!r}, which the snapshot's machine booted from (its "
            "firmware and buses are the clone's), not found",
        )
    return image


def resolve_data_disks(ctx: Context) -> list[VolumePlan]:
    plans: list[VolumePlan] = []
    for disk in ctx.vm.disks or ():
        where = f"{VM}.spec.disks[{disk.name}]"
        placement = resolve_storage(ctx, disk.storage_class_name, where)
        if placement is None:
            continue
        base = None
        fmt = placement.storage.volume_format if placement.storage else ImageFormat.QCOW2
        if disk.source.snapshot is not None:
            made = (placement.pool, volume_name(ctx.domain, f"data-{disk.name}", extension="qcow2"))
            base = resolve_snapshot_base(ctx, disk, disk_name=disk.name, volume=made, where=where)
            if base is None:
                continue
            fmt = ImageFormat.QCOW2  # an overlay on the snapshot's copy
        elif disk.source.image is not None:
            image = resolve_image(ctx, disk.source.image, f"{where}.source.image")
            if image is None:
                continue
            base = resolve_base_image(
                ctx, image=image, pool=placement.pool, where=f"{where}.source.image"
            )
            if base is None:
                continue
            fmt = ImageFormat.QCOW2  # an overlay on the image
        plans.append(
            VolumePlan(
                disk=disk.name,
                pool=placement.pool,
                volume=volume_name(ctx.domain, f"data-{disk.name}", extension=fmt.value),
                format=fmt,
                capacity_bytes=disk.size_gi_b * GIB,
                base=base,
                delete_on_termination=disk.delete_on_termination,
            )
        )
    return plans
