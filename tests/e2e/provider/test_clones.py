"""Clones (`source.snapshot`) on the lab's busybox guest: a VM whose boot disk and data disk name a
LibvirtSnapshot gets new disks that are qcow2 overlays on the snapshot's copies (grown to the size
asked), with the snapshot's content, and boots; it outlives the VM the snapshot was taken from;
deleting the snapshot waits (`InUse`, naming the clone's volumes) until the clone is deleted, and
deleting the clone removes exactly its own volumes. A clone of a missing snapshot waits with a
reason and nothing built.

The busybox guest has no agent and no file system the test can reach, so content is compared
through the pool: the clone's disk, before it ever ran, is identical to the snapshot's copy
(`qemu-img compare` on the lab's local pool, read-only). One source machine and one snapshot for
the module. Cost: about 35 s on an idle lab (a daemon start, two boots, one snapshot, two VM
deletions and a snapshot deletion).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import libvirt
import pytest
from kubernetes import client
from lxml import etree

from libvirt_provider.snapshot.names import snapshot_prefix
from tests.support.factories import pair
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
    wait_reason,
)
from tests.support.lab_access import LabInfo
from tests.support.snapshots import get_snapshot
from tests.support.virt import machine_volumes
from tests.support.waiting import eventually

PLURAL = "libvirtsnapshots"
ORIGIN = "origin"
CLONE = "copy"
SNAP = "base"
GIB = 2**30


def _from_snapshot(size: int) -> dict[str, Any]:
    return {
        "source": {
            "snapshot": {"apiGroup": GROUP, "kind": "LibvirtSnapshot", "name": SNAP},
        },
        "sizeGiB": size,
    }


@pytest.fixture(scope="module")
def snapped(api_client: client.ApiClient, daemon: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """A running busybox machine with a data disk, and a ready snapshot of it."""
    with namespace(api_client) as ns:
        disks = [{"name": "scratch", "source": {"blank": True}, "sizeGiB": 1}]
        create(api_client, pair(ns, ORIGIN, vm_spec={"disks": disks, "powerOffMode": "Hard"}))
        wait_ready(api_client, ns, ORIGIN, what="the machine to snapshot Ready")
        body = {
            "apiVersion": f"{GROUP}/{V}",
            "kind": "LibvirtSnapshot",
            "metadata": {"name": SNAP, "namespace": ns},
            "spec": {"virtualMachineName": ORIGIN},
        }
        custom = client.CustomObjectsApi(api_client)
        custom.create_namespaced_custom_object(GROUP, V, ns, PLURAL, body)
        snap: dict[str, Any] = eventually(
            lambda: (
                (s := get_snapshot(api_client, ns, SNAP))
                and (s.get("status") or {}).get("readyToUse")
                and s
            ),
            timeout=90,
            interval=0.5,
            what="the snapshot ready",
        )
        try:
            yield ns, snap
        finally:
            for item in custom.list_namespaced_custom_object(GROUP, V, ns, PLURAL)["items"]:
                custom.delete_namespaced_custom_object(
                    GROUP, V, ns, PLURAL, item["metadata"]["name"]
                )


def _volume(virt: libvirt.virConnect, lab: LabInfo, name: str) -> libvirt.virStorageVol:
    return virt.storagePoolLookupByName(lab.pool).storageVolLookupByName(name)


def _backing(vol: libvirt.virStorageVol) -> str | None:
    return etree.fromstring(vol.XMLDesc(0)).findtext("backingStore/path")


def _copy(snap: dict[str, Any], disk: str) -> str:
    return str(next(d["volume"] for d in snap["status"]["disks"] if d["name"] == disk))


def test_a_clone_of_a_missing_snapshot_waits_with_a_reason_and_nothing_built(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, snapped: Any
) -> None:
    ns, _ = snapped
    vm, lm = pair(ns, "lost", vm_spec={"powerState": "PoweredOff"})
    vm["spec"]["bootDisk"] = _from_snapshot(1)
    vm["spec"]["bootDisk"]["source"]["snapshot"]["name"] = "nope"
    create(api_client, [vm, lm])
    cond = wait_reason(api_client, ns, "lost", "ReferenceNotFound", what="the clone waiting")
    assert "LibvirtSnapshot 'nope' not found" in cond["message"]
    assert machine_volumes(virt, lab, f"{domain_of(api_client, ns, 'lost')}--") == []
    delete_vm_and_wait(api_client, ns, "lost", what="the waiting clone deleted")


def test_a_clone_is_an_overlay_on_the_snapshot_with_its_content_and_boots(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, snapped: Any
) -> None:
    ns, snap = snapped
    scratch = {"name": "scratch", **_from_snapshot(1)}
    vm, lm = pair(ns, CLONE, vm_spec={"powerState": "PoweredOff", "disks": [scratch]})
    vm["spec"]["bootDisk"] = _from_snapshot(2)
    create(api_client, [vm, lm])
    wait_reason(api_client, ns, CLONE, "PoweredOff", timeout=120, what="the clone built")
    domain = domain_of(api_client, ns, CLONE)

    boot = _volume(virt, lab, f"{domain}--boot.qcow2")
    boot_copy = _volume(virt, lab, _copy(snap, "bootDisk"))
    data = _volume(virt, lab, f"{domain}--data-scratch.qcow2")
    data_copy = _volume(virt, lab, _copy(snap, "scratch"))
    # Overlays on the snapshot's copies (made in constant time), grown to the size asked.
    assert _backing(boot) == boot_copy.path()
    assert _backing(data) == data_copy.path()
    assert boot.info()[1] == 2 * GIB
    assert boot.info()[2] < 4 * 2**20  # the overlay holds nothing of its own yet
    # Their content is the snapshot's, byte for byte as the guest sees it (the grown tail reads
    # as zeros).
    for clone_vol, copy_vol in ((boot, boot_copy), (data, data_copy)):
        compared = subprocess.run(
            ["qemu-img", "compare", "-U", clone_vol.path(), copy_vol.path()],
            capture_output=True,
            text=True,
            check=False,
        )
        assert compared.returncode == 0, compared.stdout + compared.stderr

    patch_vm(api_client, ns, CLONE, {"powerState": "PoweredOn"})
    wait_reason(api_client, ns, CLONE, "Running", timeout=120, what="the clone running")
    assert virt.lookupByName(domain).isActive()


def test_the_clone_outlives_the_vm_the_snapshot_was_taken_from(
    api_client: client.ApiClient, virt: libvirt.virConnect, snapped: Any
) -> None:
    ns, _ = snapped
    dom = virt.lookupByName(domain_of(api_client, ns, CLONE))
    run_id = dom.ID()
    delete_vm_and_wait(api_client, ns, ORIGIN, what="the snapshot's source VM deleted")
    assert dom.isActive()
    assert dom.ID() == run_id


def test_a_snapshot_waits_for_its_clones_and_a_clone_deletes_only_its_own_volumes(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, snapped: Any
) -> None:
    ns, snap = snapped
    prefix = snapshot_prefix(snap["metadata"]["uid"])
    copies = sorted(d["volume"] for d in snap["status"]["disks"])
    domain = domain_of(api_client, ns, CLONE)
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(GROUP, V, ns, PLURAL, SNAP)
    waiting: dict[str, Any] = eventually(
        lambda: (
            (cond := condition(get_snapshot(api_client, ns, SNAP), "Ready")).get("reason")
            == "InUse"
            and cond
        ),
        timeout=60,
        interval=0.5,
        what="the snapshot's deletion waiting for its clone",
    )
    assert f"{domain}--boot.qcow2" in waiting["message"]
    assert f"{domain}--data-scratch.qcow2" in waiting["message"]
    assert sorted(machine_volumes(virt, lab, prefix)) == copies
    assert (get_snapshot(api_client, ns, SNAP) or {})["metadata"]["finalizers"]
    # The built clone goes on meanwhile: it no longer needs its snapshot to be usable.
    clone = get(api_client, ns, CLONE, vm=False)
    assert condition(clone, "InfrastructureReady")["reason"] == "Running"
    assert virt.lookupByName(domain).isActive()

    delete_vm_and_wait(api_client, ns, CLONE, what="the clone deleted")
    assert machine_volumes(virt, lab, f"{domain}--") == []
    eventually(
        lambda: get_snapshot(api_client, ns, SNAP) is None,
        timeout=60,
        what="the snapshot gone once its clone is",
    )
    assert machine_volumes(virt, lab, prefix) == []
    assert get(api_client, ns, CLONE, vm=False) is None
