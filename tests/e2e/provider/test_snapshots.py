"""LibvirtSnapshot on the lab's busybox guest (no guest agent): a running machine is copied
without being stopped (recorded as Crash-consistent), a stopped one too, the copies are overlays
on the machine's image holding only what it wrote, they outlive the VM, and deleting the snapshot
removes them. A missing or unlinked VM is reported with a reason and an Event; copies that do not
fit their pool wait with `PoolFull`, writing nothing, and go on by themselves once there is room.
One guest is booted for the module. Cost: 22 s measured on the lab, 88 s while other labs loaded
the cores (a daemon start, one boot, four snapshots, a power-off, the VM's and the snapshots'
deletions), plus the full pool's test (a stopped machine, no boot; see its docstring).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import libvirt
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity
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
    vm_status,
    wait_ready,
)
from tests.support.lab_access import LabInfo
from tests.support.small_pool import small_pool
from tests.support.snapshots import create_snapshot, get_snapshot
from tests.support.virt import machine_volumes
from tests.support.waiting import eventually

PLURAL = "libvirtsnapshots"
VM = "snapped"
SMALL_POOL = "vmapi-snapshot-small"
TINY_CLASS = "vmapi-snapshot-tiny"
MIB = 1024 * 1024


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


def _pool_free(api: client.ApiClient, pool: str) -> int | None:
    """`pool`'s free bytes as the host's LibvirtHost reports them (its heartbeat refreshes the
    pool, which is also what the daemon's own check reads)."""
    found = client.CustomObjectsApi(api).get_cluster_custom_object(GROUP, V, "libvirthosts", HOST)
    for entry in ((found.get("status") or {}).get("capacity") or {}).get("pools") or []:
        if entry["name"] == pool:
            return int(parse_quantity(entry["available"]))
    return None


def _volumes_in(virt: libvirt.virConnect, pool: str) -> list[str]:
    return [v.name() for v in virt.storagePoolLookupByName(pool).listAllVolumes(0)]


def test_copies_that_do_not_fit_their_pool_wait_and_write_nothing_until_there_is_room(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, machine: str
) -> None:
    """A stopped machine whose 1 GiB data disk is alone in a pool of a tmpfs in the lab's libvirtd
    (`tests/support/small_pool.py`; the disk is admitted only where its whole size fits), then
    filled behind libvirt's back to leave 12 MiB, less than a copy's headroom: its snapshot
    reports `PoolFull` naming the pool, with an Event, and no copy exists in either pool; once
    the pool is emptied the same snapshot is taken by itself. The fill holds about 1 GiB of
    memory for a few seconds. Cost: a machine built without booting, one snapshot, up to a
    heartbeat (10 s) for the host to see each change of the pool, and the daemon's backoff."""
    ns = machine
    custom = client.CustomObjectsApi(api_client)
    with small_pool(lab, None, SMALL_POOL, size=1024 * MIB + 32 * MIB) as pool:
        storage_class = {
            "apiVersion": f"{GROUP}/{V}",
            "kind": "LibvirtStorageClass",
            "metadata": {"name": TINY_CLASS},
            "spec": {"pool": SMALL_POOL, "volumeFormat": "qcow2"},
        }
        custom.create_cluster_custom_object(GROUP, V, "libvirtstorageclasses", storage_class)
        try:
            disks = [
                {
                    "name": "tight",
                    "source": {"blank": True},
                    "sizeGiB": 1,
                    "storageClassName": TINY_CLASS,
                }
            ]
            spec = {"powerState": "PoweredOff", "disks": disks}
            create(api_client, pair(ns, "cramped", vm_spec=spec))
            eventually(
                lambda: vm_status(api_client, ns, "cramped").get("powerState") == "PoweredOff",
                timeout=120,
                what="the machine with a disk in the small pool built",
            )
            pool.leave(12 * MIB)
            eventually(
                lambda: (
                    (free := _pool_free(api_client, SMALL_POOL)) is not None and free < 16 * MIB
                ),
                timeout=60,
                what=f"{HOST} reporting pool {SMALL_POOL} nearly full",
            )

            create_snapshot(api_client, ns, "crammed", "cramped")
            cond = _reason(api_client, ns, "crammed", "PoolFull")
            assert SMALL_POOL in cond["message"], cond
            assert SMALL_POOL in _event(api_client, ns, "crammed", "PoolFull")
            waiting = get_snapshot(api_client, ns, "crammed") or {}
            assert not (waiting.get("status") or {}).get("readyToUse")
            prefix = snapshot_prefix(waiting["metadata"]["uid"])
            assert not [v for v in _pool_volumes(virt, lab) if v.startswith(prefix)]
            assert not [v for v in _volumes_in(virt, SMALL_POOL) if v.startswith(prefix)]

            pool.empty()
            taken = _ready(api_client, ns, "crammed")["status"]
            assert {d["name"] for d in taken["disks"]} == {"bootDisk", "tight"}
            tight = next(d for d in taken["disks"] if d["name"] == "tight")
            assert tight["volume"] in _volumes_in(virt, SMALL_POOL)
            assert tight["volume"].startswith(prefix)
        finally:
            # The snapshot's copy and the machine's disk live in the small pool: both go before it.
            with contextlib.suppress(ApiException):
                custom.delete_namespaced_custom_object(GROUP, V, ns, PLURAL, "crammed")
            eventually(
                lambda: get_snapshot(api_client, ns, "crammed") is None,
                timeout=60,
                what="snapshot crammed gone",
            )
            if get(api_client, ns, "cramped", vm=True) is not None:
                delete_vm_and_wait(api_client, ns, "cramped", what="the cramped machine deleted")
            custom.delete_cluster_custom_object(GROUP, V, "libvirtstorageclasses", TINY_CLASS)
