"""Disks backed by pool volumes, and the virtio-scsi controller when a SCSI device needs one.

Sources are `type='volume'` (pool plus volume name) rather than file paths: the pool owns the
path, so a pool backed by a directory, LVM or Ceph looks the same here, and a renamed pool
directory does not stale the definition.

Read back, a disk is known by its user alias, else by its target. Data disks on virtio or SCSI are
attached and detached on a running domain; the boot disk, IDE and SATA disks, and any disk whose
settings changed wait for the next power cycle, except its I/O limits (`<iotune>`, from the disk's
VolumeAttributesClass): those are compared apart and changed on the running domain.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import astuple, dataclass, replace

from lxml import etree

from catalog.image import CdromBus, DiskBus
from libvirt_provider.domainxml.changes import (
    Change,
    DeviceAction,
    DeviceEdit,
    DeviceKind,
    compare_devices,
)
from libvirt_provider.resolved import DomainDisk, DomainSpec, IoTune

__all__ = [
    "DISK_ALIAS_PREFIX",
    "DiskFacts",
    "compare_disks",
    "disk_alias",
    "disk_facts",
    "find_disk",
    "iotune_parameters",
    "needs_scsi_controller",
    "parse_disks",
    "pool_volumes",
    "render_disk",
    "render_scsi_controller",
]


# User aliases must start with "ua-" to survive in the persistent definition (libvirt >= 3.9).
DISK_ALIAS_PREFIX = "ua-disk-"


def disk_alias(name: str) -> str:
    return f"{DISK_ALIAS_PREFIX}{name}"


def render_disk(devices: etree._Element, disk: DomainDisk) -> None:
    element = etree.SubElement(devices, "disk", type="volume", device="disk")
    # discard=unmap lets a guest's TRIM shrink qcow2 allocations on the host.
    etree.SubElement(element, "driver", name="qemu", type=disk.format.value, discard="unmap")
    etree.SubElement(element, "source", pool=disk.pool, volume=disk.volume)
    etree.SubElement(element, "target", dev=disk.target, bus=disk.bus.value)
    _render_iotune(element, disk.iotune)
    serial = etree.SubElement(element, "serial")
    serial.text = disk.serial
    if disk.boot:
        etree.SubElement(element, "boot", order="1")
    etree.SubElement(element, "alias", name=disk_alias(disk.name))


def _render_iotune(element: etree._Element, iotune: IoTune) -> None:
    """Only the limits set, in libvirt's order, as libvirt itself writes the element: a disk
    without limits has none, and a definition read back compares equal."""
    values = {k: v for k, v in iotune.settings().items() if v}
    if not values:
        return
    parent = etree.SubElement(element, "iotune")
    for name, value in values.items():
        etree.SubElement(parent, name).text = str(value)


def iotune_parameters(limits: tuple[tuple[str, str], ...]) -> dict[str, int | str]:
    """Every libvirt block-I/O-tune parameter for `limits` (as `DiskFacts.iotune` holds them),
    zero where none is set: virDomainSetBlockIoTune keeps any parameter it is not given, so a
    limit the new class drops must be given as 0 to be cleared."""
    given = dict(limits)
    values: dict[str, int | str] = {}
    for name, zero in IoTune().settings().items():
        text = given.get(name)
        values[name] = zero if text is None else int(text)
    if "group_name" in given:
        values["group_name"] = given["group_name"]
    return values


def needs_scsi_controller(spec: DomainSpec) -> bool:
    if any(d.bus is DiskBus.SCSI for d in spec.disks):
        return True
    return spec.cloud_init is not None and spec.cloud_init.bus is CdromBus.SCSI


def render_scsi_controller(devices: etree._Element) -> None:
    # virtio-scsi rather than an emulated LSI or AHCI: every modern guest kernel has the driver,
    # and the lab's guest kernel has no AHCI at all.
    etree.SubElement(devices, "controller", type="scsi", index="0", model="virtio-scsi")


@dataclass(frozen=True)
class DiskFacts:
    """A `<disk>` element as read back: a disk, or a CD-ROM such as the cloud-init media."""

    key: str  # the user alias (ua-disk-<name>), else the target
    pool: str | None
    volume: str | None
    format: str | None
    bus: str | None
    target: str | None
    serial: str | None
    boot: bool
    iotune: tuple[tuple[str, str], ...] = ()
    """The `<iotune>` children that are set (name, text), in document order; compared apart."""


def _iotune_facts(element: etree._Element) -> tuple[tuple[str, str], ...]:
    parent = element.find("iotune")
    if parent is None:
        return ()
    found = [(str(child.tag), (child.text or "").strip()) for child in parent]
    # libvirt may write a limit as 0 (unset), and a group name with no limit means nothing.
    return tuple(sorted((k, v) for k, v in found if v not in ("", "0")))


def disk_facts(element: etree._Element) -> DiskFacts:
    source = element.find("source")
    target = element.find("target")
    driver = element.find("driver")
    alias = element.find("alias")
    alias_name = alias.get("name") if alias is not None else None
    target_dev = target.get("dev") if target is not None else None
    return DiskFacts(
        key=alias_name or target_dev or "?",
        pool=source.get("pool") if source is not None else None,
        volume=source.get("volume") if source is not None else None,
        format=driver.get("type") if driver is not None else None,
        bus=target.get("bus") if target is not None else None,
        target=target_dev,
        serial=element.findtext("serial"),
        boot=element.find("boot") is not None,
        iotune=_iotune_facts(element),
    )


def parse_disks(root: etree._Element) -> Mapping[str, DiskFacts]:
    """The disks (not CD-ROMs, floppies or LUNs) by key."""
    disks = (e for e in root.findall("devices/disk") if e.get("device", "disk") == "disk")
    return {facts.key: facts for facts in map(disk_facts, disks)}


def pool_volumes(xml: str | bytes) -> set[tuple[str, str]]:
    """(pool, volume) of every pool-backed disk and CD-ROM a domain definition names: what a
    teardown knows the domain used, independent of any name."""
    root = etree.fromstring(xml)
    found = set()
    for element in root.findall("devices/disk"):
        facts = disk_facts(element)
        if facts.pool and facts.volume:
            found.add((facts.pool, facts.volume))
    return found


def find_disk(root: etree._Element, key: str) -> etree._Element | None:
    """The `<disk>` element a change names by its key."""
    for element in root.findall("devices/disk"):
        if disk_facts(element).key == key:
            return element
    return None


def _hotplug(disk: DiskFacts) -> bool:
    return not disk.boot and disk.bus in ("virtio", "scsi")


def _view(disk: DiskFacts) -> tuple[object, ...]:
    return astuple(replace(disk, iotune=()))


def compare_disks(
    desired: Mapping[str, DiskFacts], observed: Mapping[str, DiskFacts]
) -> list[Change]:
    """The disks' changes, and apart from them each disk whose I/O limits changed: a live
    change even where the rest of the disk waits for a power cycle (a disk added or removed
    brings its limits with it)."""
    changes = compare_devices(DeviceKind.DISK, desired, observed, view=_view, hotplug=_hotplug)
    for key in sorted(set(desired) & set(observed)):
        want, have = desired[key].iotune, observed[key].iotune
        if want != have:
            edit = DeviceEdit(DeviceKind.DISK, key, DeviceAction.IO_LIMITS)
            changes.append(Change(edit, dict(want), dict(have), live=True))
    return changes
