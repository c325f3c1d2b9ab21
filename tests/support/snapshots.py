"""LibvirtSnapshots and LibvirtRestores as the e2e tests make and read them: one body each, one
read that says "gone"."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from tests.support.kube import GROUP, V

SNAPSHOTS = c.SNAPSHOT_PLURAL


def create_snapshot(api: client.ApiClient, ns: str, name: str, vm: str, **spec: Any) -> None:
    """A LibvirtSnapshot `name` of VM `vm`; `spec` adds fields (disks, consistency)."""
    body = {
        "apiVersion": f"{GROUP}/{V}",
        "kind": c.SNAPSHOT_KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": {"virtualMachineName": vm, **spec},
    }
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, V, ns, SNAPSHOTS, body)


def get_snapshot(api: client.ApiClient, ns: str, name: str) -> dict[str, Any] | None:
    """The LibvirtSnapshot, or None once it is gone."""
    try:
        found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, V, ns, SNAPSHOTS, name
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return found


def create_restore(api: client.ApiClient, ns: str, name: str, snapshot: str, vm: str) -> None:
    """A LibvirtRestore `name` rolling VM `vm` back to its snapshot `snapshot`."""
    body = {
        "apiVersion": f"{GROUP}/{V}",
        "kind": c.RESTORE_KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": {"snapshotName": snapshot, "virtualMachineName": vm},
    }
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, V, ns, c.RESTORE_PLURAL, body
    )


def get_restore(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, V, ns, c.RESTORE_PLURAL, name
    )
    return found
