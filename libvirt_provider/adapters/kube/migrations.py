"""A migration's Kubernetes calls (`migration.store.MigrationStore`): read a LibvirtMigration,
its LibvirtMachine, VirtualMachine and target LibvirtHost afresh, write the migration's status
and finalizer, the machine's lock (status.migration) and binding, and post Events.

Migrations are few and short-lived, so every read goes to the API server: no copies to keep.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from kubernetes import client

from generic.adapters.kubeclient import REQUEST_TIMEOUT
from generic.formats import parse_micro_time
from libvirt_provider import constants as c
from libvirt_provider.adapters.kube.adapter import translated
from libvirt_provider.adapters.kube.namespaced import NamespacedStore
from libvirt_provider.errors import NotFoundError
from libvirt_provider.hosts.heartbeat import renewals

__all__ = ["MigrationApi"]

Obj = dict[str, Any]


class MigrationApi(NamespacedStore):
    """`MigrationStore` over the API server, for the daemon serving `host`."""

    def __init__(self, api: client.ApiClient, *, host: str, lease_namespace: str) -> None:
        super().__init__(api, host=host)
        self._lease_namespace = lease_namespace

    def get_migration(self, namespace: str, name: str) -> Obj | None:
        return self._get(c.GROUP, c.MIGRATION_PLURAL, namespace, name)

    def list_migrations(self) -> list[Obj]:
        return self._list(c.MIGRATION_PLURAL)

    def get_host(self, name: str) -> Obj | None:
        try:
            with translated():
                return cast(
                    Obj,
                    self._api.get_cluster_custom_object(
                        c.GROUP, c.VERSION, c.HOST_PLURAL, name, _request_timeout=REQUEST_TIMEOUT
                    ),
                )
        except NotFoundError:
            return None

    def list_hosts(self) -> list[Obj]:
        return self._list(c.HOST_PLURAL)

    def heartbeats(self) -> dict[str, dt.datetime]:
        with translated():
            leases = cast(
                Obj,
                self._api.list_namespaced_lease(
                    self._lease_namespace,
                    label_selector=c.HOST_LABEL,
                    _request_timeout=REQUEST_TIMEOUT,
                ),
            )
        return renewals(
            (
                (lease.get("metadata") or {}).get("labels"),
                parse_micro_time((lease.get("spec") or {}).get("renewTime")),
            )
            for lease in leases.get("items") or []
        )

    def patch_migration_status(self, obj: Obj, status: Obj) -> Obj:
        return self._patch_status(c.MIGRATION_PLURAL, obj, status)

    def patch_machine_status(self, obj: Obj, status: Obj, *, conditional: bool = False) -> Obj:
        return self._patch_status(c.MACHINE_PLURAL, obj, status, conditional=conditional)

    def set_migration_finalizers(self, obj: Obj, finalizers: list[str]) -> Obj:
        return self._set_finalizers(c.MIGRATION_PLURAL, c.MIGRATION_KIND, obj, finalizers)

    def move_machine(self, obj: Obj, host: str) -> Obj:
        # Conditioned on the machine as read: the CEL rule admits the new host only while
        # status.migration names it, which the same object shows.
        meta = obj.get("metadata") or {}
        body = {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "labels": {c.HOST_LABEL: host},
            },
            "spec": {"host": host},
        }
        with translated():
            written = self._api.patch_namespaced_custom_object(
                c.GROUP,
                c.VERSION,
                str(meta.get("namespace")),
                c.MACHINE_PLURAL,
                str(meta.get("name")),
                body,
                _request_timeout=REQUEST_TIMEOUT,
            )
        return cast(Obj, written) if isinstance(written, dict) else obj

    def event(self, obj: Any, *, reason: str, message: str, warning: bool = False) -> None:
        """Record an Event on a migration or a machine (repeats are counted); never raises."""
        kind = obj.get("kind") or c.MIGRATION_KIND
        self._record(kind, obj, reason=reason, message=message, warning=warning)
