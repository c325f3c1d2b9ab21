"""The daemon in the lab, driven through the Kubernetes API the way a user drives kubectl.

One daemon (`libvirt-provider`, both controllers) runs for this module against the lab's
kube-apiserver and libvirtd; every test works in a namespace of its own and leaves no domain and
no volume behind.
"""

from __future__ import annotations

import urllib.request
import uuid
from pathlib import Path
from typing import Any

import libvirt
from kubernetes import client
from lxml import etree
from lxml.builder import E

from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor
from tests.support.factories import HOST, pair
from tests.support.kube import (
    GROUP,
    VM_GROUP,
    condition,
    create,
    delete_quietly,
    delete_vm_and_wait,
    domain_of,
    get,
    patch_vm,
    wait_ready,
)
from tests.support.lab_access import LabInfo
from tests.support.virt import domain_names, machine_volumes
from tests.support.waiting import eventually


def test_a_linked_pair_boots_powers_and_deletes_cleanly(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str
) -> None:
    name = "web"
    create(api_client, pair(ns, name))
    domain = domain_of(api_client, ns, name)

    def ready_with_address() -> dict[str, Any] | None:
        vm = get(api_client, ns, name, vm=True)
        status = (vm or {}).get("status") or {}
        ok = status.get("ready") and status.get("powerState") == "PoweredOn"
        return vm if ok and status.get("addresses") else None

    vm = eventually(ready_with_address, timeout=240, interval=1, what="VM Ready with an address")
    status = vm["status"]
    assert status["addresses"][0]["address"].startswith(lab.env.get("VMAPI_LAB_SUBNET", "10.213"))
    lm = get(api_client, ns, name, vm=False)
    assert lm is not None
    assert status["providerID"] == f"libvirt://{HOST}/{lm['metadata']['uid']}"
    assert condition(vm, "Ready")["status"] == "True"
    dom = virt.lookupByName(domain)
    assert dom.UUIDString() == lm["metadata"]["uid"]
    driver = LibvirtHypervisor(lab.libvirt_uri)
    try:
        sources = driver.disk_sources(dom.UUIDString())
    finally:
        driver.close()
    assert [Path(s).name for s in sources] == [f"{domain}--boot.qcow2"]
    assert not dom.autostart()

    # The test guest honours the ACPI power button: TrySoft needs no force.
    patch_vm(api_client, ns, name, {"powerState": "PoweredOff"})
    eventually(
        lambda: (
            (get(api_client, ns, name, vm=True) or {}).get("status", {}).get("powerState")
            == "PoweredOff"
        ),
        timeout=120,
        what="PoweredOff reported on the VM",
    )
    assert dom.state()[0] == libvirt.VIR_DOMAIN_SHUTOFF
    assert not (get(api_client, ns, name, vm=True) or {})["status"].get("addresses")

    patch_vm(api_client, ns, name, {"powerState": "Suspended"})
    patch_vm(api_client, ns, name, {"powerState": "PoweredOn"})
    eventually(ready_with_address, timeout=240, interval=1, what="Ready again after power-on")

    patch_vm(api_client, ns, name, {"powerState": "Suspended"})
    eventually(
        lambda: (
            (get(api_client, ns, name, vm=True) or {}).get("status", {}).get("powerState")
            == "Suspended"
        ),
        timeout=120,
        what="Suspended reported on the VM",
    )
    assert dom.hasManagedSaveImage(0)

    patch_vm(api_client, ns, name, {"powerState": "PoweredOn"})
    eventually(ready_with_address, timeout=240, interval=1, what="resumed from the saved state")

    delete_vm_and_wait(api_client, ns, name, what="the VM and its LibvirtMachine gone")
    assert domain not in domain_names(virt)
    assert machine_volumes(virt, lab, f"{domain}--") == []


def test_a_one_sided_link_creates_nothing_and_says_why(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str
) -> None:
    vm, lm = pair(ns, "lonely")
    vm["spec"]["infrastructureRef"]["name"] = "someone-else"
    create(api_client, [vm, lm])
    cond = eventually(
        lambda: condition(get(api_client, ns, "lonely", vm=False), "InfrastructureReady") or None,
        timeout=60,
        what="a condition on the LibvirtMachine",
    )
    assert cond["status"] == "False"
    assert cond["reason"] == "LinkMismatch"
    assert "someone-else" in cond["message"]
    domain = domain_of(api_client, ns, "lonely")
    assert domain not in domain_names(virt)
    assert machine_volumes(virt, lab, f"{domain}--") == []


def test_unsupported_configuration_is_reported_and_nothing_is_built(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str
) -> None:
    snapshot = {"apiGroup": "example.com", "kind": "Snapshot", "name": "s"}
    disk = {"name": "d", "source": {"snapshot": snapshot}, "sizeGiB": 1}
    create(api_client, pair(ns, "snap", vm_spec={"disks": [disk]}))

    def reported() -> dict[str, Any] | None:
        vm = get(api_client, ns, "snap", vm=True)
        cond = condition(vm, "InfrastructureReady")
        return cond if cond.get("reason") == "UnsupportedByProvider" else None

    cond = eventually(reported, timeout=60, what="UnsupportedByProvider on the VM")
    assert "snapshot" in cond["message"]
    events = client.CoreV1Api(api_client).list_namespaced_event(ns).items
    warned = {
        e.involved_object.kind
        for e in events
        if e.reason == "UnsupportedByProvider" and e.type == "Warning"
    }
    assert warned == {"VirtualMachine", "LibvirtMachine"}
    domain = domain_of(api_client, ns, "snap")
    assert domain not in domain_names(virt)
    assert machine_volumes(virt, lab, f"{domain}--") == []


def test_a_foreign_domain_with_our_name_is_refused_and_left_intact(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str
) -> None:
    vm, machine = pair(ns, "squatted")
    create(api_client, [machine])  # not linked yet: nothing is built, but its uid is known
    domain = domain_of(api_client, ns, "squatted")
    foreign_uuid = str(uuid.uuid4())
    xml = E.domain(
        E.name(domain),
        E.uuid(foreign_uuid),
        E.memory("64", unit="MiB"),
        E.os(E.type("hvm")),
        type="qemu",
    )
    foreign = virt.defineXML(etree.tostring(xml, encoding="unicode"))
    try:
        create(api_client, [vm])
        cond = eventually(
            lambda: (
                condition(get(api_client, ns, "squatted", vm=False), "InfrastructureReady") or None
            ),
            timeout=60,
            what="a condition on the LibvirtMachine",
        )
        assert cond["reason"] == "ForeignDomain"
        assert foreign_uuid in cond["message"]
        assert virt.lookupByName(domain).UUIDString() == foreign_uuid
        assert machine_volumes(virt, lab, f"{domain}--") == []
        # The name's owner has a volume named after it; deleting the squatter must leave it.
        pool = virt.storagePoolLookupByName(lab.pool)
        pool.createXML(
            f"<volume><name>{domain}--boot.qcow2</name><capacity>1048576</capacity>"
            "<target><format type='qcow2'/></target></volume>",
            0,
        )
        custom = client.CustomObjectsApi(api_client)
        delete_quietly(custom, VM_GROUP, ns, "virtualmachines", "squatted")
        delete_quietly(custom, GROUP, ns, "libvirtmachines", "squatted")
        eventually(
            lambda: get(api_client, ns, "squatted", vm=False) is None,
            timeout=60,
            what="the squatting LibvirtMachine deleted",
        )
        assert machine_volumes(virt, lab, f"{domain}--") == [f"{domain}--boot.qcow2"]
        assert virt.lookupByName(domain).UUIDString() == foreign_uuid
    finally:
        for name in machine_volumes(virt, lab, f"{domain}--"):
            virt.storagePoolLookupByName(lab.pool).storageVolLookupByName(name).delete(0)
        foreign.undefine()


def test_two_vms_claiming_one_machine_build_one_domain(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str
) -> None:
    first, machine = pair(ns, "shared")
    second = pair(ns, "intruder")[0]
    second["spec"]["infrastructureRef"]["name"] = "shared"
    create(api_client, [first, machine])
    wait_ready(api_client, ns, "shared", what="the linked VM Ready")
    create(api_client, [second])
    cond = eventually(
        lambda: condition(get(api_client, ns, "intruder", vm=True), "InfrastructureReady") or None,
        timeout=60,
        what="a condition on the second VM",
    )
    assert cond["status"] == "False"
    assert cond["reason"] == "NotAdopted"
    lm = get(api_client, ns, "shared", vm=False)
    assert lm is not None
    owners = [o["name"] for o in lm["metadata"].get("ownerReferences") or [] if o.get("controller")]
    assert owners == ["shared"]
    domain = domain_of(api_client, ns, "shared")
    assert [d for d in domain_names(virt) if d == domain] == [domain]
    assert machine_volumes(virt, lab, f"{domain}--") == [f"{domain}--boot.qcow2"]


def test_the_daemon_serves_health_and_metrics(daemon: str) -> None:
    base = daemon
    with urllib.request.urlopen(f"{base}/healthz", timeout=5) as resp:
        assert (resp.status, resp.read()) == (200, b"ok\n")
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    assert "python_info" in text
    assert "vmapi_generic" in text
