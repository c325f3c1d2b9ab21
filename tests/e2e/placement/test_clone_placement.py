"""Clones across the lab's libvirt hosts: a machine cloned from a LibvirtSnapshot is placed on the
host holding the snapshot's copies, the only host where it can be built, and a clone pinned to
another host waits with a reason naming the snapshot's host, with nothing made there.

Every machine stays powered off (placement and building are what is checked; no guest boots).
Cost: about 25 s on an idle lab beside the module's daemons (one machine built, one snapshot of
it stopped, two clones, their deletions).
"""

from __future__ import annotations

from typing import Any

import libvirt
from kubernetes import client

from libvirt_provider.naming import domain_name
from tests.support.daemons import Fleet
from tests.support.factories import unplaced
from tests.support.hosts import placed_on
from tests.support.kube import GROUP, V, create, delete_vm_and_wait, get, wait_reason
from tests.support.lab_access import LabInfo
from tests.support.snapshots import get_snapshot
from tests.support.virt import connections, hosts_defining
from tests.support.waiting import eventually

PLURAL = "libvirtsnapshots"


def _domain(api: client.ApiClient, ns: str, name: str) -> str:
    obj = get(api, ns, name, vm=False)
    assert obj is not None
    return domain_name(ns, name, str(obj["metadata"]["uid"]))


def _volumes(conn: libvirt.virConnect, prefix: str) -> list[str]:
    return [
        v.name()
        for pool in conn.listAllStoragePools(libvirt.VIR_CONNECT_LIST_STORAGE_POOLS_ACTIVE)
        for v in pool.listAllVolumes(0)
        if v.name().startswith(prefix)
    ]


def test_a_clone_goes_to_its_snapshots_host_and_a_clone_pinned_elsewhere_waits(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    source_host, other_host = lab.hosts[1].name, lab.hosts[0].name
    create(api_client, unplaced(ns, "origin", lm_spec={"host": source_host}))
    with connections(lab) as conns:
        origin = _domain(api_client, ns, "origin")
        eventually(
            lambda: hosts_defining(conns, origin) == [source_host],
            timeout=90,
            what="the source machine built on its host",
        )
    body = {
        "apiVersion": f"{GROUP}/{V}",
        "kind": "LibvirtSnapshot",
        "metadata": {"name": "gold", "namespace": ns},
        "spec": {"virtualMachineName": "origin"},
    }
    custom = client.CustomObjectsApi(api_client)
    custom.create_namespaced_custom_object(GROUP, V, ns, PLURAL, body)
    snap: dict[str, Any] = eventually(
        lambda: (
            (s := get_snapshot(api_client, ns, "gold"))
            and (s.get("status") or {}).get("readyToUse")
            and s
        ),
        timeout=90,
        interval=0.5,
        what="the snapshot of the stopped machine ready",
    )
    assert snap["status"]["host"] == source_host

    from_gold = {
        "bootDisk": {
            "source": {"snapshot": {"apiGroup": GROUP, "kind": "LibvirtSnapshot", "name": "gold"}},
            "sizeGiB": 1,
        }
    }
    create(api_client, unplaced(ns, "copy", vm_spec=from_gold))
    create(api_client, unplaced(ns, "astray", vm_spec=from_gold, lm_spec={"host": other_host}))

    assert placed_on(api_client, ns, "copy") == source_host
    cond = wait_reason(
        api_client, ns, "astray", "NotAvailableOnHost", what="the clone pinned elsewhere waiting"
    )
    assert f"LibvirtSnapshot 'gold' is on host '{source_host}'" in cond["message"]
    with connections(lab) as conns:
        copy, astray = _domain(api_client, ns, "copy"), _domain(api_client, ns, "astray")
        eventually(
            lambda: hosts_defining(conns, copy) == [source_host],
            timeout=90,
            what="the clone built on the snapshot's host",
        )
        assert hosts_defining(conns, astray) == []
        assert _volumes(conns[other_host], f"{astray}--") == []

    for name in ("astray", "copy", "origin"):
        delete_vm_and_wait(api_client, ns, name, what=f"{name} deleted")
    custom.delete_namespaced_custom_object(GROUP, V, ns, PLURAL, "gold")
    eventually(
        lambda: get_snapshot(api_client, ns, "gold") is None,
        timeout=60,
        what="the snapshot deleted once its clone is",
    )
