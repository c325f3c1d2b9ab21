"""Data disks: blank volumes made with the machine, attached, and removed with it unless kept."""

from __future__ import annotations

import libvirt
from kubernetes import client
from lxml import etree

from tests.support.factories import pair
from tests.support.kube import GROUP, VM_GROUP, V, create, domain_of, get, patch_vm, wait_ready
from tests.support.lab_access import LabInfo
from tests.support.virt import machine_volumes
from tests.support.waiting import eventually

GIB = 1024**3


def test_blank_data_disks_follow_the_machine_and_delete_on_termination(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str
) -> None:
    disks = [
        {"name": "scratch", "source": {"blank": True}, "sizeGiB": 2},
        {"name": "keep", "source": {"blank": True}, "sizeGiB": 1, "deleteOnTermination": False},
    ]
    create(api_client, pair(ns, "disky", vm_spec={"disks": disks}))
    wait_ready(api_client, ns, "disky", what="the VM Ready with its data disks")
    domain = domain_of(api_client, ns, "disky")
    owned = machine_volumes(virt, lab, f"{domain}--")
    assert len(owned) == 3, owned
    scratch = next(v for v in owned if "scratch" in v)
    keep = next(v for v in owned if "keep" in v)
    pool = virt.storagePoolLookupByName(lab.pool)
    assert pool.storageVolLookupByName(scratch).info()[1] == 2 * GIB
    xml = etree.fromstring(virt.lookupByName(domain).XMLDesc(0).encode())
    attached = {s.get("volume") for s in xml.iterfind("devices/disk/source")}
    assert {scratch, keep} <= attached

    # Disks only grow; a running machine's disks grow online.
    boot = f"{domain}--boot.qcow2"
    patch_vm(api_client, ns, "disky", {"bootDisk": {"sizeGiB": 2}, "disks": [
        {**disks[0], "sizeGiB": 3}, disks[1]
    ]})  # fmt: skip
    eventually(
        lambda: (
            pool.storageVolLookupByName(boot).info()[1] == 2 * GIB
            and pool.storageVolLookupByName(scratch).info()[1] == 3 * GIB
        ),
        timeout=60,
        interval=0.5,
        what="the boot and scratch disks grown",
    )
    assert virt.lookupByName(domain).isActive()
    events = client.CoreV1Api(api_client).list_namespaced_event(ns).items
    grown = [e.message for e in events if e.reason == "DiskGrown"]
    assert len(grown) == 2
    assert all("while running" in m for m in grown)

    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        VM_GROUP, V, ns, "virtualmachines", "disky"
    )
    eventually(
        lambda: get(api_client, ns, "disky", vm=False) is None,
        timeout=120,
        what="the machine deleted",
    )
    try:
        assert machine_volumes(virt, lab, f"{domain}--") == [keep]
    finally:
        pool.storageVolLookupByName(keep).delete(0)


def test_a_data_disk_from_an_image_is_an_overlay_hot_plugged_into_a_running_machine(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str
) -> None:
    create(api_client, pair(ns, "copier"))
    wait_ready(api_client, ns, "copier", what="the VM Ready")
    domain = domain_of(api_client, ns, "copier")
    dom = virt.lookupByName(domain)
    run_id = dom.ID()
    image = {"apiGroup": GROUP, "kind": "LibvirtImage", "name": "test-guest"}
    patch_vm(
        api_client,
        ns,
        "copier",
        {"disks": [{"name": "copy", "source": {"image": image}, "sizeGiB": 2}]},
    )
    pool = virt.storagePoolLookupByName(lab.pool)

    def attached() -> str | None:
        xml = etree.fromstring(dom.XMLDesc(0).encode())
        volumes = [s.get("volume") or "" for s in xml.iterfind("devices/disk/source")]
        return next((v for v in volumes if "copy" in v), None)

    volume = eventually(attached, timeout=60, interval=0.5, what="the image disk hot-plugged")
    assert dom.ID() == run_id
    vol_xml = etree.fromstring(pool.storageVolLookupByName(volume).XMLDesc(0).encode())
    base = pool.storageVolLookupByName(lab.guest_volume)
    assert vol_xml.findtext("backingStore/path") == base.path()
    assert vol_xml.find("backingStore/format").get("type") == "qcow2"  # type: ignore[union-attr]
    assert pool.storageVolLookupByName(volume).info()[1] == 2 * GIB
