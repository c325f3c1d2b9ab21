"""Single devices as XML documents, for libvirt's attach, detach and update-device calls.

Hot-plugging a NIC or a data disk, or swapping the cloud-init media, takes the device element on
its own. These reuse the area renderers, so a hot-plugged device is byte-for-byte the element a
full definition would contain, and the next comparison sees no drift.
"""

from __future__ import annotations

from lxml import etree

from libvirt_provider.render.cloudinit import render_cloud_init
from libvirt_provider.render.disks import render_disk
from libvirt_provider.render.nics import render_interface
from libvirt_provider.resolved import CloudInitMedia, Disk, Interface

__all__ = ["cloud_init_device_xml", "disk_device_xml", "interface_device_xml"]


def _alone(devices: etree._Element) -> str:
    (element,) = devices
    return etree.tostring(element, encoding="unicode")


def interface_device_xml(nic: Interface) -> str:
    devices = etree.Element("devices")
    render_interface(devices, nic)
    return _alone(devices)


def disk_device_xml(disk: Disk) -> str:
    devices = etree.Element("devices")
    render_disk(devices, disk)
    return _alone(devices)


def cloud_init_device_xml(media: CloudInitMedia) -> str:
    devices = etree.Element("devices")
    render_cloud_init(devices, media)
    return _alone(devices)
