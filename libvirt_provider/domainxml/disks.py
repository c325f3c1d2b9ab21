"""Disks backed by pool volumes, and the virtio-scsi controller when a SCSI device needs one.

Sources are `type='volume'` (pool plus volume name) rather than file paths: the pool owns the
path, so a pool backed by a directory, LVM or Ceph looks the same here, and a renamed pool
directory does not stale the definition.
"""

from __future__ import annotations

from lxml import etree

from catalog.image import CdromBus, DiskBus
from libvirt_provider.resolved import Disk, DomainSpec

__all__ = ["disk_alias", "needs_scsi_controller", "render_disk", "render_scsi_controller"]


def disk_alias(name: str) -> str:
    # User aliases must start with "ua-" to survive in the persistent definition (libvirt >= 3.9).
    return f"ua-disk-{name}"


def render_disk(devices: etree._Element, disk: Disk) -> None:
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
