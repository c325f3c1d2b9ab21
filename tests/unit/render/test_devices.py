"""Single-device XML for hot-plug is exactly the element a full definition holds."""

from __future__ import annotations

from lxml import etree

from libvirt_provider.render import (
    cloud_init_device_xml,
    disk_device_xml,
    interface_device_xml,
    render_domain,
)
from tests.unit.render.cases import CASES


def _same(a: etree._Element, b: str) -> bool:
    return etree.tostring(a, method="c14n") == etree.tostring(etree.fromstring(b), method="c14n")


def test_nic_and_disk_devices_match_the_full_definition() -> None:
    spec = CASES["many-disks-spice-no-serial"]
    domain = render_domain(spec)
    interfaces = domain.findall("devices/interface")
    disks = domain.findall("devices/disk[@device='disk']")
    assert len(interfaces) == len(spec.interfaces)
    for element, nic in zip(interfaces, spec.interfaces, strict=True):
        assert _same(element, interface_device_xml(nic))
    for element, disk in zip(disks, spec.disks, strict=True):
        assert _same(element, disk_device_xml(disk))
    assert spec.cloud_init is not None
    cdrom = domain.find("devices/disk[@device='cdrom']")
    assert cdrom is not None
    assert _same(cdrom, cloud_init_device_xml(spec.cloud_init))
