"""A daemon killed (SIGKILL) in the middle of a restore converges when it comes back: killed after
deleting the machine's boot volume and before making its overlay, the restarted daemon makes the
disks again, reports the restore Succeeded, lets the machine go (it runs again), and leaves no
volume but the machine's own (overlays on the snapshot's copies) and the copies.

The daemon runs the LibvirtMachine, snapshot and restore controllers alone (`--no-generic`) on a
host name of its own, as test_snapshot_crash.py does. One busybox guest. Cost: about 60 s on an
idle lab (one boot, a snapshot, a power-off, a boot again, four daemon starts).
"""

from __future__ import annotations

import signal
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import libvirt
import pytest
from kubernetes import client
from lxml import etree

from libvirt_provider import constants as c
from tests.support.daemons import start_daemon, stop_daemon
from tests.support.factories import pair
from tests.support.kube import GROUP, V, apply, condition, create, domain_of, get
from tests.support.lab_access import REPO, LabInfo
from tests.support.snapshots import create_snapshot, get_snapshot
from tests.support.virt import machine_volumes
from tests.support.waiting import eventually

HOST = "restore-crash-host"
VM = "crashy"


@contextmanager
def running_daemon(
    lab: LabInfo, *, crash_point: str | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    proc, log = start_daemon(
        lab,
        host=HOST,
        log_name="e2e-restore-crash-daemon.log",
        crash_point=crash_point,
        generic=False,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            stop_daemon(proc, log)


@pytest.fixture
def ns(lab: LabInfo, api_client: client.ApiClient) -> Iterator[str]:
    apply(lab, REPO / "crds")
    apply(lab, REPO / "deploy" / "samples" / "catalog.yaml")
    name = "rc-" + uuid.uuid4().hex[:8]
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    custom = client.CustomObjectsApi(api_client)
    plurals = (c.RESTORE_PLURAL, c.SNAPSHOT_PLURAL, c.MACHINE_PLURAL)
    left = [
        (plural, obj["metadata"]["name"])
        for plural in plurals
        for obj in custom.list_namespaced_custom_object(GROUP, V, name, plural)["items"]
    ]
    if left:
        with running_daemon(lab):
            for plural, obj_name in left:
                custom.delete_namespaced_custom_object(GROUP, V, name, plural, obj_name)
            eventually(
                lambda: (
                    not any(
                        custom.list_namespaced_custom_object(GROUP, V, name, p)["items"]
                        for p in plurals
                    )
                ),
                timeout=120,
                what="leftover restores, snapshots and machines cleaned up",
            )
    core.delete_namespace(name)


def _reason(api: client.ApiClient, ns: str) -> str:
    return str(condition(get(api, ns, VM, vm=False), "InfrastructureReady").get("reason"))


def _backing(virt: libvirt.virConnect, lab: LabInfo, name: str) -> str | None:
    vol = virt.storagePoolLookupByName(lab.pool).storageVolLookupByName(name)
    return etree.fromstring(vol.XMLDesc(0)).findtext("backingStore/path")


def _restore(api: client.ApiClient, ns: str) -> dict[str, Any]:
    found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, V, ns, c.RESTORE_PLURAL, "undo"
    )
    return found


def test_a_daemon_killed_mid_restore_converges_and_leaks_nothing(
    lab: LabInfo, api_client: client.ApiClient, virt: libvirt.virConnect, ns: str
) -> None:
    docs = pair(ns, VM)
    docs[1]["metadata"]["labels"]["infrastructure.vm-api.io/host"] = HOST
    docs[1]["spec"]["host"] = HOST
    create(api_client, docs)
    with running_daemon(lab):
        eventually(
            lambda: _reason(api_client, ns) == "Running",
            timeout=240,
            interval=1,
            what="the machine running",
        )
        create_snapshot(api_client, ns, "before", VM)
        snap = eventually(
            lambda: (
                (s := get_snapshot(api_client, ns, "before"))
                and (s.get("status") or {}).get("readyToUse")
                and s
            ),
            timeout=90,
            interval=0.5,
            what="the snapshot ready",
        )
    domain = domain_of(api_client, ns, VM)
    boot = f"{domain}--boot.qcow2"
    copy = next(d["volume"] for d in snap["status"]["disks"] if d["name"] == "bootDisk")

    body = {
        "apiVersion": f"{GROUP}/{V}",
        "kind": c.RESTORE_KIND,
        "metadata": {"name": "undo", "namespace": ns},
        "spec": {"snapshotName": "before", "virtualMachineName": VM},
    }
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP, V, ns, c.RESTORE_PLURAL, body
    )
    with running_daemon(lab, crash_point="restore:after-delete") as crashing:
        assert crashing.wait(timeout=180) == -signal.SIGKILL, "restore:after-delete not reached"
    # Killed with the boot volume deleted and its overlay not made: the machine off and held.
    assert boot not in machine_volumes(virt, lab, f"{domain}--")
    assert not virt.lookupByName(domain).isActive()
    assert (_restore(api_client, ns).get("status") or {}).get("phase") == "Restoring"
    assert ((get(api_client, ns, VM, vm=False) or {}).get("status") or {}).get("restore")

    with running_daemon(lab):
        done = eventually(
            lambda: (
                (r := _restore(api_client, ns)).get("status", {}).get("phase") == "Succeeded" and r
            ),
            timeout=120,
            interval=0.5,
            what="the restore finished after the restart",
        )
        eventually(
            lambda: _reason(api_client, ns) == "Running",
            timeout=120,
            interval=1,
            what="the machine running again",
        )
    assert condition(done, "Succeeded")["reason"] == c.RESTORE_REASON_RESTORED
    assert "restore" not in ((get(api_client, ns, VM, vm=False) or {}).get("status") or {})
    pool = virt.storagePoolLookupByName(lab.pool)
    assert _backing(virt, lab, boot) == pool.storageVolLookupByName(copy).path()
    # Nothing but the machine's own volumes and the copies: none left over by the crash.
    names = [str(v) for v in pool.listVolumes()]
    assert not [v for v in names if domain in v and not v.startswith(f"{domain}--")]

    with running_daemon(lab):
        custom = client.CustomObjectsApi(api_client)
        custom.delete_namespaced_custom_object(GROUP, V, ns, c.RESTORE_PLURAL, "undo")
        custom.delete_namespaced_custom_object(GROUP, V, ns, c.MACHINE_PLURAL, VM)
        custom.delete_namespaced_custom_object(GROUP, V, ns, c.SNAPSHOT_PLURAL, "before")
        eventually(
            lambda: (
                not any(
                    custom.list_namespaced_custom_object(GROUP, V, ns, p)["items"]
                    for p in (c.RESTORE_PLURAL, c.SNAPSHOT_PLURAL, c.MACHINE_PLURAL)
                )
            ),
            timeout=120,
            what="the restore, the machine and the snapshot deleted",
        )
    assert machine_volumes(virt, lab, f"{domain}--") == []
