"""The lab's libvirtd is a real one: the test guest boots and takes a DHCP lease we can read."""

from __future__ import annotations

import time
import uuid

import libvirt

from tests.support.lab_access import LabInfo
from tests.support.virt import dhcp_lease, guest_domain_xml, overlay_volume_xml
from tests.support.waiting import eventually


def test_guest_boots_and_takes_a_lease(lab: LabInfo, virt: libvirt.virConnect) -> None:
    name = "smoke-" + uuid.uuid4().hex[:8]
    pool = virt.storagePoolLookupByName(lab.pool)
    base = pool.storageVolLookupByName(lab.guest_volume)
    vol = pool.createXML(overlay_volume_xml(f"{name}.qcow2", base.path()), 0)
    serial = lab.dir / f"{name}.serial"
    dom = virt.defineXML(
        guest_domain_xml(lab, name=name, dom_uuid=str(uuid.uuid4()), disk=vol.path(), serial=serial)
    )
    try:
        started = time.monotonic()
        dom.create()

        address = eventually(
            lambda: dhcp_lease(dom), timeout=180, interval=0.5, what="a DHCP lease for the guest"
        )
        elapsed = time.monotonic() - started
        print(f"\nguest {name} ({lab.domain_type}): start to DHCP lease {elapsed:.1f} s, {address}")
        assert address.startswith("10.213.0.")
        console = serial.read_text(errors="replace")
        assert "VMAPI-GUEST-BOOTED" in console
        eventually(
            lambda: f"VMAPI-GUEST-LEASE eth0 {address}" in serial.read_text(errors="replace"),
            timeout=30,
            what="the guest announcing the same lease on its console",
        )
    finally:
        if dom.isActive():
            dom.destroy()
        dom.undefine()
        vol.delete(0)
