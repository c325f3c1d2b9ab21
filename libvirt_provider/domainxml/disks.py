"""Disks backed by pool volumes, and the virtio-scsi controller when a SCSI device needs one.

Sources are `type='volume'` (pool plus volume name) rather than file paths: the pool owns the
path, so a pool backed by a directory, LVM or Ceph looks the same here, and a renamed pool
directory does not stale the definition.

Read back, a disk is known by its user alias, else by its target. Data disks on virtio or SCSI are
attached and detached on a running domain; the boot disk, IDE and SATA disks, and any disk whose
settings changed wait for the next power cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import astuple, dataclass

from lxml import etree

from catalog.image import CdromBus, DiskBus
from libvirt_provider.domainxml.changes import Change, DeviceKind, compare_devices
from libvirt_provider.resolved import DomainDisk, DomainSpec

__all__ = [
    "DiskFacts",
    "compare_disks",
    "disk_alias",
    "disk_facts",
    "find_disk",
    "needs_scsi_controller",
    "parse_disks",
    "pool_volumes",
    "render_disk",
    "render_scsi_controller",
]


def disk_alias(name: str) -> str:
    # User aliases must start with "ua-" to survive in the persistent definition (libvirt >= 3.9).
    return f"ua-disk-{name}"


def render_disk(devices: etree._Element, disk: DomainDisk) -> None:
    element = etree.SubElement(devices, "disk", type="volume", device="disk")
    # discard=unmap lets a guest's TRIM shrink qcow2 allocations on the host.
    etree.SubElement(element, "driver", name="qemu", type=disk.format.value, discard="unmap")
    etree.SubElement(element, "source", pool=disk.pool, volume=disk.volume)
    etree.SubElement(element, "target", dev=disk.target, bus=disk.bus.value)
    serial = etree.SubElement(element, "serial")
    serial.text = disk.serial
    if disk.boot:
        etree.SubElement(element, "boot", order="1")
    etree.SubElement(element, "alias", name=disk_alias(disk.name))


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


def compare_disks(
    desired: Mapping[str, DiskFacts], observed: Mapping[str, DiskFacts]
) -> list[Change]:
    return compare_devices(DeviceKind.DISK, desired, observed, view=astuple, hotplug=_hotplug)
