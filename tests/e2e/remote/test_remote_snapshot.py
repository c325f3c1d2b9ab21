"""A snapshot of a machine on a remote host, taken over qemu+ssh by the remote-mode daemon: the
copy is made through libvirt's API alone (streams over the connection), lands on the remote host
as an overlay on the machine's image there, and goes with the snapshot. Cost: 24 s measured on
the lab (a remote daemon, one boot over ssh, one snapshot, two deletions).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import libvirt
import pytest
from kubernetes import client
from lxml import etree

from libvirt_provider.snapshot.names import snapshot_prefix
from tests.support.daemons import RemoteDaemon, start_remote_daemon
from tests.support.factories import remote_pair
from tests.support.hosts import delete_secret, forget_host, put_secret, set_host, ssh_data
from tests.support.kube import GROUP, V, delete_vm_and_wait, domain_of, namespace, wait_ready
from tests.support.lab_access import LabInfo, LabRemote
from tests.support.virt import host_domains, host_volumes
from tests.support.waiting import eventually

SECRET = "e2e-remote-snapshot-credentials"
PLURAL = "libvirtsnapshots"


@pytest.fixture(scope="module")
def daemon(lab: LabInfo, remote_api: client.ApiClient, remote: LabRemote) -> Iterator[RemoteDaemon]:
    put_secret(remote_api, SECRET, ssh_data(remote))
    set_host(remote_api, remote, {"uri": remote.ssh_uri, "secretRef": {"name": SECRET}})
    started = start_remote_daemon(lab, remote, "e2e-remote-snapshot")
    try:
        eventually(
            lambda: "leads: starting the generic controller" in started.text(),
            timeout=60,
            what=f"the remote daemon leading the generic controller (log: {started.log})",
        )
        yield started
    finally:
        started.stop()
        forget_host(remote_api, remote)
        delete_secret(remote_api, SECRET)


def _snapshot(api: client.ApiClient, ns: str) -> dict[str, Any] | None:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, V, ns, PLURAL)
    return next(iter(items["items"]), None)


def test_a_remote_machine_is_snapshotted_through_libvirt_s_api(
    remote_api: client.ApiClient, remote: LabRemote, daemon: RemoteDaemon
) -> None:
    custom = client.CustomObjectsApi(remote_api)
    with namespace(remote_api) as ns:
        for doc in remote_pair(ns, "far", remote):
            group, version = doc["apiVersion"].split("/")
            plural = "virtualmachines" if doc["kind"] == "VirtualMachine" else "libvirtmachines"
            custom.create_namespaced_custom_object(group, version, ns, plural, doc)
        wait_ready(remote_api, ns, "far", what="the remote machine Ready")
        domain = domain_of(remote_api, ns, "far")
        body = {
            "apiVersion": f"{GROUP}/{V}",
            "kind": "LibvirtSnapshot",
            "metadata": {"name": "far-copy", "namespace": ns},
            "spec": {"virtualMachineName": "far"},
        }
        custom.create_namespaced_custom_object(GROUP, V, ns, PLURAL, body)
        snap = eventually(
            lambda: (
                (s := _snapshot(remote_api, ns)) and (s.get("status") or {}).get("readyToUse") and s
            ),
            timeout=90,
            interval=0.5,
            what="the remote snapshot ready",
        )
        status = snap["status"]
        uid = snap["metadata"]["uid"]
        assert status["host"] == remote.name
        assert status["consistency"] == "Crash"
        assert sorted(host_volumes(remote, snapshot_prefix(uid))) == sorted(
            d["volume"] for d in status["disks"]
        )
        conn = libvirt.open(remote.uri)
        try:
            pool = conn.storagePoolLookupByName(remote.pool)
            boot = pool.storageVolLookupByName(f"{domain}--boot.qcow2")
            copy = pool.storageVolLookupByName(status["disks"][0]["volume"])
            backing = etree.fromstring(boot.XMLDesc(0)).findtext("backingStore/path")
            assert etree.fromstring(copy.XMLDesc(0)).findtext("backingStore/path") == backing
            assert conn.lookupByName(domain).isActive()
        finally:
            conn.close()
        assert not [v for v in host_volumes(remote, "snap-") if v.endswith(".pending.qcow2")]

        delete_vm_and_wait(remote_api, ns, "far", what="the remote machine deleted")
        assert domain not in host_domains(remote)
        assert host_volumes(remote, snapshot_prefix(uid))
        custom.delete_namespaced_custom_object(GROUP, V, ns, PLURAL, "far-copy")
        eventually(
            lambda: _snapshot(remote_api, ns) is None, timeout=60, what="the remote snapshot gone"
        )
        assert host_volumes(remote, snapshot_prefix(uid)) == []
