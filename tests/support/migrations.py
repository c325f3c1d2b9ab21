"""LibvirtMigrations as the e2e tests and the benchmarks make, read and delete them.

Why a module of its own: tests/e2e/migration and bench/migration_bench.py create the same objects
and clean up the same way; one copy keeps a change of the spec from reaching only some of them.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from tests.support.kube import GROUP, V
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
