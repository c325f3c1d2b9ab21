"""Hostile and careless input against the real API server and libvirtd (the hardening issue).

- Quantities that once froze or wedged the daemon are refused by the API server itself, and so
  are host names too long for the host label.
- Deleting a machine whose image and cloud-init Secret went first (a namespace being deleted)
  keeps the disk marked `deleteOnTermination: false` and removes the rest.
- Relabelling a running machine to another host changes nothing: its daemon selects it by
  spec.host, the label is set back (`HostLabelRestored`), and deleting it finishes on its host.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from typing import Any

import libvirt
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support.daemons import health_base, start_daemon
from tests.support.factories import HOST, pair
from tests.support.kube import (
    GROUP,
    VM_GROUP,
    V,
    condition,
    create,
    delete_vm_and_wait,
    domain_of,
    get,
    wait_ready,
)
from tests.support.lab_access import LabInfo
from tests.support.virt import machine_volumes
from tests.support.waiting import eventually

OTHER_HOST = "e2e-other-host"


def _refused(call: Any, field: str) -> None:
    with pytest.raises(ApiException) as raised:
        call()
    assert raised.value.status == 422, raised.value.body
    assert field in str(raised.value.body)


@pytest.mark.parametrize("quantity", ["1e200000", "1e9999999", "1e" + "9" * 62])
def test_quantities_that_once_froze_the_daemon_are_refused_by_the_api(
    api_client: client.ApiClient, ns: str, quantity: str
) -> None:
    custom = client.CustomObjectsApi(api_client)
    vm, lm = pair(ns, "huge-" + uuid.uuid4().hex[:6])
    lm["spec"]["hotplug"] = {"maxMemory": quantity}
    _refused(
        lambda: custom.create_namespaced_custom_object(GROUP, V, ns, "libvirtmachines", lm),
        "spec.hotplug.maxMemory",
    )
    vm["spec"]["instanceType"] = {"resources": {"cpus": 1, "memory": quantity}}
    _refused(
        lambda: custom.create_namespaced_custom_object(VM_GROUP, V, ns, "virtualmachines", vm),
        "spec.instanceType.resources.memory",
    )
    machine_class = {
        "apiVersion": f"{GROUP}/{V}",
        "kind": "LibvirtMachineClass",
        "metadata": {"name": "huge-" + uuid.uuid4().hex[:6]},
        "spec": {"cpus": 1, "memory": quantity},
    }
    _refused(
        lambda: custom.create_cluster_custom_object(
            GROUP, V, "libvirtmachineclasses", machine_class
        ),
        "spec.memory",
    )


def test_host_names_the_host_label_cannot_hold_are_refused_by_the_api(
    api_client: client.ApiClient, ns: str
) -> None:
    # 64 characters: too long for the host label's value (and, past 240, for the Lease's name).
    long_name = "h" * 64
    custom = client.CustomObjectsApi(api_client)
    _, lm = pair(ns, "far-" + uuid.uuid4().hex[:6])
    lm["spec"]["host"] = long_name
    _refused(
        lambda: custom.create_namespaced_custom_object(GROUP, V, ns, "libvirtmachines", lm),
        "spec.host",
    )
    host = {"apiVersion": f"{GROUP}/{V}", "kind": "LibvirtHost", "metadata": {"name": long_name}}
    _refused(
        lambda: custom.create_cluster_custom_object(GROUP, V, "libvirthosts", host),
        "at most 63 characters",
    )


@pytest.fixture
def own_image(api_client: client.ApiClient, lab: LabInfo) -> Iterator[str]:
    """A LibvirtImage of the lab's guest that only this test uses (and may delete)."""
    name = "doomed-" + uuid.uuid4().hex[:6]
    custom = client.CustomObjectsApi(api_client)
    body = {
        "apiVersion": f"{GROUP}/{V}",
        "kind": "LibvirtImage",
        "metadata": {"name": name},
        "spec": {
            "source": {"volume": {"pool": lab.pool, "volume": lab.guest_volume}},
            "format": "qcow2",
            "firmware": {"type": "BIOS"},
        },
    }
    custom.create_cluster_custom_object(GROUP, V, "libvirtimages", body)
    yield name
    try:
        custom.delete_cluster_custom_object(GROUP, V, "libvirtimages", name)
    except ApiException as err:
        if err.status != 404:
            raise


def test_a_kept_disk_survives_deletion_after_its_image_and_secret_are_gone(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str, own_image: str
) -> None:
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    core.create_namespaced_secret(
        ns,
        {
            "metadata": {"name": "ci"},
            "data": {"user-data": base64.b64encode(b"#cloud-config\n").decode()},
        },
    )
    image_ref = {"apiGroup": GROUP, "kind": "LibvirtImage", "name": own_image}
    spec = {
        "bootDisk": {"source": {"image": image_ref}, "sizeGiB": 1},
        "disks": [
            {"name": "keep", "source": {"blank": True}, "sizeGiB": 1, "deleteOnTermination": False},
            {"name": "scratch", "source": {"blank": True}, "sizeGiB": 1},
        ],
        "bootstrap": {"cloudInit": {"userData": {"name": "ci", "key": "user-data"}}},
    }
    create(api_client, pair(ns, "orphan", vm_spec=spec))
    wait_ready(api_client, ns, "orphan", what="the VM Ready with a kept disk")
    domain = domain_of(api_client, ns, "orphan")
    owned = machine_volumes(virt, lab, f"{domain}--")
    kept = f"{domain}--data-keep.qcow2"
    assert kept in owned
    assert len(owned) == 4, owned  # boot, cloud-init, keep, scratch

    # What a namespace deletion does: the Secret and the image go before the machine.
    core.delete_namespaced_secret("ci", ns)
    custom.delete_cluster_custom_object(GROUP, V, "libvirtimages", own_image)
    custom.delete_namespaced_custom_object(VM_GROUP, V, ns, "virtualmachines", "orphan")
    eventually(
        lambda: get(api_client, ns, "orphan", vm=False) is None,
        timeout=120,
        what="the machine deleted without its image and Secret",
    )
    try:
        assert machine_volumes(virt, lab, f"{domain}--") == [kept]
        assert domain not in [d.name() for d in virt.listAllDomains()]
    finally:
        virt.storagePoolLookupByName(lab.pool).storageVolLookupByName(kept).delete(0)


def _relabel(api_client: client.ApiClient, ns: str, name: str, host: str) -> None:
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        GROUP,
        V,
        ns,
        "libvirtmachines",
        name,
        {"metadata": {"labels": {"infrastructure.vm-api.io/host": host}}},
    )


def _label(api_client: client.ApiClient, ns: str, name: str) -> str | None:
    labels = ((get(api_client, ns, name, vm=False) or {}).get("metadata") or {}).get("labels")
    return (labels or {}).get("infrastructure.vm-api.io/host")


def _reasons(api_client: client.ApiClient, ns: str, name: str) -> list[str]:
    events = client.CoreV1Api(api_client).list_namespaced_event(ns).items
    return [e.reason for e in events if e.involved_object.name == name]


def test_a_relabelled_machine_stays_served_by_its_host_and_its_deletion_finishes(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str
) -> None:
    other, log = start_daemon(lab, host=OTHER_HOST, log_name="e2e-other-host.log", generic=False)
    try:
        health_base(other, log)
        create(api_client, pair(ns, "anchored"))
        wait_ready(api_client, ns, "anchored", what="the VM Ready on its host")
        domain = virt.lookupByName(domain_of(api_client, ns, "anchored"))
        domain_id = domain.ID()
        uid = (get(api_client, ns, "anchored", vm=False) or {})["metadata"]["uid"]

        _relabel(api_client, ns, "anchored", OTHER_HOST)
        # spec.host decides: the label is set back to it, with a Warning saying why.
        eventually(
            lambda: (
                "HostLabelRestored" in _reasons(api_client, ns, "anchored")
                and _label(api_client, ns, "anchored") == HOST
            ),
            timeout=60,
            what="the host label restored to spec.host, with a HostLabelRestored Event",
        )
        # Still served by its host: status kept, the same domain run, nothing built twice.
        assert (
            condition(get(api_client, ns, "anchored", vm=False), "InfrastructureReady").get(
                "reason"
            )
            == "Running"
        )
        assert [d.UUIDString() for d in virt.listAllDomains()].count(uid) == 1
        assert virt.lookupByUUIDString(uid).ID() == domain_id
        assert OTHER_HOST not in str(
            (get(api_client, ns, "anchored", vm=False) or {}).get("status")
        )

        # Relabelled again and deleted straight away: the deletion finishes on its own host.
        _relabel(api_client, ns, "anchored", OTHER_HOST)
        delete_vm_and_wait(api_client, ns, "anchored", what="the relabelled pair deleted")
        eventually(
            lambda: uid not in [d.UUIDString() for d in virt.listAllDomains()],
            timeout=30,
            what="the domain gone from its host",
        )
    finally:
        other.terminate()
        assert other.wait(timeout=60) == 0, f"see {log}"
