"""LibvirtMigrations as this directory's tests make, read and wait for them, and what a lab
host's pool holds of a machine (shared by test_migration.py and test_migration_limits.py)."""

from __future__ import annotations

from typing import Any

import libvirt
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from tests.support.kube import GROUP, V
from tests.support.lab_access import LabInfo
from tests.support.waiting import eventually

PLURAL = c.MIGRATION_PLURAL


def migration(ns: str, name: str, machine: str, target: str | None, **spec: Any) -> dict[str, Any]:
    """A LibvirtMigration's body (no target: the source chooses)."""
    body: dict[str, Any] = {"machineName": machine, **spec}
    if target is not None:
        body["targetHost"] = target
    return {
        "apiVersion": f"{GROUP}/{V}",
        "kind": c.MIGRATION_KIND,
        "metadata": {"name": name, "namespace": ns},
        "spec": body,
    }


def create_migration(api: client.ApiClient, body: dict[str, Any]) -> None:
    ns = body["metadata"]["namespace"]
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, V, ns, PLURAL, body)


def read_migration(api: client.ApiClient, ns: str, name: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, V, ns, PLURAL, name
        )
        return obj
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def wait_ended(
    api: client.ApiClient, ns: str, name: str, *, timeout: float = 240
) -> dict[str, Any]:
    """The migration once its phase is Succeeded, Failed or Cancelled."""
    ends = {c.MIGRATION_PHASE_SUCCEEDED, c.MIGRATION_PHASE_FAILED, c.MIGRATION_PHASE_CANCELLED}
    found: dict[str, Any] = eventually(
        lambda: (
            (obj := read_migration(api, ns, name)) is not None
            and (obj.get("status") or {}).get("phase") in ends
            and obj
        ),
        timeout=timeout,
        interval=0.5,
        what=f"migration {ns}/{name} to end",
    )
    return found


def delete_migrations(api: client.ApiClient, ns: str) -> None:
    """Delete the namespace's migrations and wait until they are gone (finalizers done)."""
    custom = client.CustomObjectsApi(api)
    for obj in custom.list_namespaced_custom_object(GROUP, V, ns, PLURAL)["items"]:
        custom.delete_namespaced_custom_object(GROUP, V, ns, PLURAL, obj["metadata"]["name"])
    eventually(
        lambda: not custom.list_namespaced_custom_object(GROUP, V, ns, PLURAL)["items"],
        timeout=60,
        what=f"the migrations of {ns} gone",
    )


def migration_events(api: client.ApiClient, ns: str, name: str) -> list[str]:
    """The reasons of the Events on the migration."""
    return [
        str(e.reason)
        for e in client.CoreV1Api(api).list_namespaced_event(ns).items
        if e.involved_object.kind == c.MIGRATION_KIND and e.involved_object.name == name
    ]


def pool_volumes(conn: libvirt.virConnect, lab: LabInfo, prefix: str) -> list[str]:
    """The lab pool's volumes whose names start with `prefix` (a machine's domain name)."""
    pool = conn.storagePoolLookupByName(lab.pool)
    pool.refresh(0)
    return [v.name() for v in pool.listAllVolumes(0) if v.name().startswith(prefix)]
