"""A daemon killed (SIGKILL) in the middle of a snapshot of a running machine converges when it
comes back: the machine writes its own volumes again, the snapshot is taken again from the start
and reported ready only once complete, and nothing is leaked once it is deleted.

The daemon runs the LibvirtMachine and snapshot controllers alone (`--no-generic`) on a host name
of its own, as tests/e2e/provider/test_restart_safety.py does. One busybox guest serves both
crash points. Cost: 49 s measured on the lab (one boot, five daemon starts).
"""

from __future__ import annotations

import signal
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import libvirt
import pytest
from kubernetes import client
from lxml import etree

from libvirt_provider.snapshot.names import snapshot_prefix
from tests.support.daemons import start_daemon, stop_daemon
from tests.support.factories import pair
from tests.support.kube import GROUP, V, apply, condition, create, domain_of, get
from tests.support.lab_access import REPO, LabInfo
from tests.support.snapshots import create_snapshot, get_snapshot
from tests.support.virt import machine_volumes
from tests.support.waiting import eventually

HOST = "snapshot-crash-host"
PLURAL = "libvirtsnapshots"


@contextmanager
def running_daemon(
    lab: LabInfo, *, crash_point: str | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    proc, log = start_daemon(
        lab,
        host=HOST,
        log_name="e2e-snapshot-crash-daemon.log",
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
    name = "sc-" + uuid.uuid4().hex[:8]
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    custom = client.CustomObjectsApi(api_client)
    left = [
        (plural, obj["metadata"]["name"])
        for plural in (PLURAL, "libvirtmachines")
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
                        for p in (PLURAL, "libvirtmachines")
                    )
                ),
                timeout=120,
                what="leftover snapshots and machines cleaned up",
            )
    core.delete_namespace(name)


def _volumes(virt: libvirt.virConnect, lab: LabInfo) -> list[str]:
    return [str(v) for v in virt.storagePoolLookupByName(lab.pool).listVolumes()]


def _disk_sources(dom: libvirt.virDomain) -> list[str]:
    root = etree.fromstring(dom.XMLDesc(0))
    return [s.get("volume") or s.get("file") or "" for s in root.iterfind("devices/disk/source")]


def test_a_daemon_killed_mid_snapshot_converges_and_leaks_nothing(
    lab: LabInfo, api_client: client.ApiClient, virt: libvirt.virConnect, ns: str
) -> None:
    docs = pair(ns, "crashy")
    docs[1]["metadata"]["labels"]["infrastructure.vm-api.io/host"] = HOST
    docs[1]["spec"]["host"] = HOST
    create(api_client, docs)
    with running_daemon(lab):
        eventually(
            lambda: (
                condition(get(api_client, ns, "crashy", vm=False), "InfrastructureReady").get(
                    "reason"
                )
                == "Running"
            ),
            timeout=240,
            interval=1,
            what="the machine running",
        )
    domain = domain_of(api_client, ns, "crashy")
    dom = virt.lookupByName(domain)
    run_id = dom.ID()

    for name, point in (("first", "snapshot:after-divert"), ("second", "snapshot:after-copy")):
        create_snapshot(api_client, ns, name, "crashy")
        with running_daemon(lab, crash_point=point) as crashing:
            assert crashing.wait(timeout=120) == -signal.SIGKILL, f"{point} was not reached"
        snap = get_snapshot(api_client, ns, name)
        assert snap is not None
        uid = snap["metadata"]["uid"]
        # Killed with the machine's writes diverted: it writes into the pending overlay now.
        assert any(s.endswith(".pending.qcow2") for s in _disk_sources(dom)), _disk_sources(dom)
        assert not (snap.get("status") or {}).get("readyToUse")

        with running_daemon(lab):
            ready = eventually(
                lambda name=name: (
                    (s := get_snapshot(api_client, ns, name))
                    and (s.get("status") or {}).get("readyToUse")
                    and s
                ),
                timeout=90,
                interval=0.5,
                what=f"snapshot {name} ready after the restart",
            )
        assert dom.isActive()
        assert dom.ID() == run_id
        assert _disk_sources(dom)[0] == f"{domain}--boot.qcow2"
        volumes = _volumes(virt, lab)
        assert not [v for v in volumes if v.endswith(".pending.qcow2")]
        assert sorted(v for v in volumes if v.startswith(snapshot_prefix(uid))) == sorted(
            d["volume"] for d in ready["status"]["disks"]
        )
        events = client.CoreV1Api(api_client).list_namespaced_event(ns).items
        assert any(
            e.reason == "SnapshotRecovered" and e.involved_object.name == name for e in events
        )

    uids = [
        s["metadata"]["uid"]
        for s in (get_snapshot(api_client, ns, n) for n in ("first", "second"))
        if s
    ]
    with running_daemon(lab):
        custom = client.CustomObjectsApi(api_client)
        for name in ("first", "second"):
            custom.delete_namespaced_custom_object(GROUP, V, ns, PLURAL, name)
        custom.delete_namespaced_custom_object(GROUP, V, ns, "libvirtmachines", "crashy")
        eventually(
            lambda: (
                not custom.list_namespaced_custom_object(GROUP, V, ns, PLURAL)["items"]
                and get(api_client, ns, "crashy", vm=False) is None
            ),
            timeout=120,
            what="the snapshots and the machine deleted",
        )
    volumes = _volumes(virt, lab)
    assert not [v for v in volumes for uid in uids if v.startswith(snapshot_prefix(uid))]
    assert machine_volumes(virt, lab, f"{domain}--") == []
