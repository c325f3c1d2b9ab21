"""LibvirtSnapshot on the lab's busybox guest (no guest agent): a running machine is copied
without being stopped (recorded as Crash-consistent), a stopped one too, the copies are overlays
on the machine's image holding only what it wrote, they outlive the VM, and deleting the snapshot
removes them. A missing or unlinked VM is reported with a reason and an Event. One guest is
booted for the module. Cost: 22 s measured on the lab, 88 s while other labs loaded the cores
(a daemon start, one boot, four snapshots, a power-off, the VM's and the snapshots' deletions).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import libvirt
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from lxml import etree

from libvirt_provider.snapshot.names import snapshot_prefix
from tests.support.factories import HOST, pair
from tests.support.kube import (
    GROUP,
    V,
    condition,
    create,
    delete_vm_and_wait,
    domain_of,
    get,
    namespace,
    patch_vm,
    wait_ready,
)
from tests.support.lab_access import LabInfo
from tests.support.snapshots import create_snapshot, get_snapshot
from tests.support.virt import machine_volumes
from tests.support.waiting import eventually

PLURAL = "libvirtsnapshots"
VM = "snapped"


@pytest.fixture(scope="module")
def machine(api_client: client.ApiClient, daemon: str) -> Iterator[str]:
    """A running busybox machine with a data disk, in a namespace of the module's."""
    with namespace(api_client) as ns:
        disks = [{"name": "scratch", "source": {"blank": True}, "sizeGiB": 1}]
        create(api_client, pair(ns, VM, vm_spec={"disks": disks, "powerOffMode": "Hard"}))
        wait_ready(api_client, ns, VM, what="the machine to snapshot Ready")
        try:
            yield ns
        finally:
            custom = client.CustomObjectsApi(api_client)
            for snap in custom.list_namespaced_custom_object(GROUP, V, ns, PLURAL)["items"]:
                custom.delete_namespaced_custom_object(
                    GROUP, V, ns, PLURAL, snap["metadata"]["name"]
                )
            eventually(
                lambda: not custom.list_namespaced_custom_object(GROUP, V, ns, PLURAL)["items"],
                timeout=60,
                what="every snapshot of the module deleted",
            )


def _ready(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = eventually(
        lambda: (
            (s := get_snapshot(api, ns, name)) and (s.get("status") or {}).get("readyToUse") and s
        ),
        timeout=90,
        interval=0.5,
        what=f"snapshot {name} ready",
    )
    return found


def _reason(api: client.ApiClient, ns: str, name: str, reason: str) -> dict[str, Any]:
    found: dict[str, Any] = eventually(
        lambda: (
            (cond := condition(get_snapshot(api, ns, name), "Ready")).get("reason") == reason
            and cond
        ),
        timeout=60,
        interval=0.5,
        what=f"snapshot {name} reporting {reason}",
    )
    return found


def _event(api: client.ApiClient, ns: str, name: str, reason: str) -> str:
    """The message of `name`'s Event with `reason`, once it is posted: the daemon posts it after
    the status write that a test has just seen."""

    def posted() -> str | None:
        items = client.CoreV1Api(api).list_namespaced_event(ns).items
        found = [e.message for e in items if e.involved_object.name == name and e.reason == reason]
        return found[0] if found else None

    return eventually(posted, timeout=30, what=f"the {reason} Event of {name}")


def _pool_volumes(virt: libvirt.virConnect, lab: LabInfo) -> dict[str, libvirt.virStorageVol]:
    pool = virt.storagePoolLookupByName(lab.pool)
    return {v.name(): v for v in pool.listAllVolumes(0)}


def test_a_running_machine_is_copied_without_stopping_and_a_stopped_one_too(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, machine: str
) -> None:
    ns = machine
    domain = domain_of(api_client, ns, VM)
    dom = virt.lookupByName(domain)
    run_id = dom.ID()

    create_snapshot(api_client, ns, "hot", VM)
    hot = _ready(api_client, ns, "hot")
    status = hot["status"]
    # The busybox guest has no agent: Auto falls back to a crash-consistent copy.
    assert status["consistency"] == "Crash"
    assert status["host"] == HOST
    assert status["source"]["powerState"] == "Running"
    assert status["source"]["spec"]["disks"][0]["name"] == "scratch"
    assert {d["name"] for d in status["disks"]} == {"bootDisk", "scratch"}
    # The machine ran on throughout, on its own volumes again, and no pending overlay is left.
    assert dom.isActive()
    assert dom.ID() == run_id
    sources = {s.get("volume") for s in etree.fromstring(dom.XMLDesc(0)).iterfind(".//disk/source")}
    assert f"{domain}--boot.qcow2" in sources
    volumes = _pool_volumes(virt, lab)
    assert not [v for v in volumes if v.endswith(".pending.qcow2")]
    prefix = snapshot_prefix(hot["metadata"]["uid"])
    assert sorted(v for v in volumes if v.startswith(prefix)) == sorted(
        d["volume"] for d in status["disks"]
    )
    # The boot disk's copy is an overlay on the machine's image, as small as what it wrote.
    boot = next(d for d in status["disks"] if d["name"] == "bootDisk")
    image = volumes[lab.guest_volume]
    copy = volumes[boot["volume"]]
    copy_xml = etree.fromstring(copy.XMLDesc(0))
    assert copy_xml.findtext("backingStore/path") == image.path()
    assert boot["sizeBytes"] == volumes[f"{domain}--boot.qcow2"].info()[1] == 1024**3
    assert boot["allocatedBytes"] < image.info()[2]
    assert condition(hot, "Ready")["reason"] == "SnapshotReady"
    _event(api_client, ns, "hot", "SnapshotTaken")

    # The spec cannot change once made.
    with pytest.raises(ApiException) as refused:
        client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
            GROUP, V, ns, PLURAL, "hot", {"spec": {"consistency": "Filesystem"}}
        )
    assert refused.value.status == 422
    assert "immutable" in str(refused.value.body)

    patch_vm(api_client, ns, VM, {"powerState": "PoweredOff"})
    eventually(lambda: not dom.isActive(), timeout=60, what="the machine powered off")
    # Filesystem consistency needs an agent that a stopped machine cannot have: it waits.
    create_snapshot(api_client, ns, "frozen", VM, consistency="Filesystem")
    waiting = _reason(api_client, ns, "frozen", "GuestAgentUnavailable")
    assert "powered off" in waiting["message"]
    _event(api_client, ns, "frozen", "GuestAgentUnavailable")

    create_snapshot(api_client, ns, "cold", VM, disks=["bootDisk"], consistency="Crash")
    cold = _ready(api_client, ns, "cold")["status"]
    assert cold["consistency"] == "Crash"
    assert cold["source"]["powerState"] == "Stopped"
    assert [d["name"] for d in cold["disks"]] == ["bootDisk"]
    assert not dom.isActive()


def test_snapshots_outlive_their_machine_and_take_their_volumes_with_them(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, machine: str
) -> None:
    ns = machine
    hot = _ready(api_client, ns, "hot")
    uid = hot["metadata"]["uid"]
    domain = domain_of(api_client, ns, VM)
    delete_vm_and_wait(api_client, ns, VM, what="the snapshotted machine deleted")
    assert machine_volumes(virt, lab, f"{domain}--") == []
    kept = [v for v in _pool_volumes(virt, lab) if v.startswith(snapshot_prefix(uid))]
    assert sorted(kept) == sorted(d["volume"] for d in hot["status"]["disks"])
    assert (get_snapshot(api_client, ns, "hot") or {}).get("status", {}).get("readyToUse") is True

    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(GROUP, V, ns, PLURAL, "hot")
    eventually(
        lambda: get_snapshot(api_client, ns, "hot") is None, timeout=60, what="snapshot hot gone"
    )
    assert not [v for v in _pool_volumes(virt, lab) if v.startswith(snapshot_prefix(uid))]


def test_a_snapshot_of_a_missing_or_unlinked_source_says_why(
    api_client: client.ApiClient, machine: str
) -> None:
    ns = machine
    body = {
        "apiVersion": f"{GROUP}/{V}",
        "kind": "LibvirtSnapshot",
        "metadata": {"name": "orphan", "namespace": ns},
        "spec": {"virtualMachineName": "no-such-vm"},
    }
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(GROUP, V, ns, PLURAL, body)
    cond = _reason(api_client, ns, "orphan", "SourceNotFound")
    assert "no-such-vm" in cond["message"]
    _event(api_client, ns, "orphan", "SourceNotFound")
    assert (get_snapshot(api_client, ns, "orphan") or {})["metadata"].get("finalizers") is None
    assert get(api_client, ns, "no-such-vm", vm=True) is None

    # A VM whose LibvirtMachine does not exist: nothing to copy, and it says which.
    vm = pair(ns, "unlinked")[0]
    vm["spec"]["infrastructureRef"]["name"] = "ghost"
    create(api_client, [vm])
    body["metadata"]["name"] = "stray"
    body["spec"]["virtualMachineName"] = "unlinked"
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(GROUP, V, ns, PLURAL, body)
    cond = _reason(api_client, ns, "stray", "SourceNotLinked")
    assert "'ghost'" in cond["message"]
    _event(api_client, ns, "stray", "SourceNotLinked")
