"""A drain's Kubernetes calls, for the daemon serving the drained host: the host afresh, the
machines bound to it, the drain's LibvirtMigrations (by the drain label), their creation and
deletion, a machine's VirtualMachine powered off, and the host's `status.drain` with its Drained
condition. Everything a migration's choice of target reads comes from `MigrationApi`.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from generic import constants as vmapi
from generic.adapters.kubeclient import REQUEST_TIMEOUT
from libvirt_provider import constants as c
from libvirt_provider.adapters.kube.adapter import translated
from libvirt_provider.adapters.kube.migrations import MigrationApi
from libvirt_provider.errors import NotFoundError, StateConflictError

__all__ = ["DrainApi"]

Obj = dict[str, Any]


class DrainApi(MigrationApi):
    """The drain's reads and writes over the API server, for the daemon serving `host`."""

    def __init__(self, api: client.ApiClient, *, host: str, lease_namespace: str) -> None:
        super().__init__(api, host=host, lease_namespace=lease_namespace)
        self._host = host

    def machines_on_host(self) -> list[Obj]:
        """Every LibvirtMachine bound to this host (`spec.host`), in every namespace."""
        return self._list(c.MACHINE_PLURAL, field_selector=f"{c.HOST_FIELD}={self._host}")

    def drain_migrations(self) -> list[Obj]:
        """The LibvirtMigrations of this host's drains, in every namespace."""
        return self._list(c.MIGRATION_PLURAL, label_selector=f"{c.DRAIN_HOST_LABEL}={self._host}")

    def create_migration(self, namespace: str, name: str, machine: str) -> None:
        """The drain's migration of `machine` (no target: the source's daemon chooses); one that
        exists already is left as it is."""
        body = {
            "apiVersion": f"{c.GROUP}/{c.VERSION}",
            "kind": c.MIGRATION_KIND,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {c.DRAIN_HOST_LABEL: self._host},
            },
            "spec": {"machineName": machine},
        }
        try:
            with translated():
                self._api.create_namespaced_custom_object(
                    c.GROUP,
                    c.VERSION,
                    namespace,
                    c.MIGRATION_PLURAL,
                    body,
                    _request_timeout=REQUEST_TIMEOUT,
                )
        except StateConflictError:
            pass

    def delete_migration(self, namespace: str, name: str) -> None:
        try:
            with translated():
                self._api.delete_namespaced_custom_object(
                    c.GROUP,
                    c.VERSION,
                    namespace,
                    c.MIGRATION_PLURAL,
                    name,
                    _request_timeout=REQUEST_TIMEOUT,
                )
        except NotFoundError:
            pass

    def power_off(self, namespace: str, vm: str) -> None:
        """The VirtualMachine's `spec.powerState: PoweredOff`, as its user would set it."""
        with translated():
            self._api.patch_namespaced_custom_object(
                vmapi.GROUP,
                vmapi.VERSION,
                namespace,
                vmapi.PLURAL,
                vm,
                {"spec": {"powerState": vmapi.POWERED_OFF}},
                _request_timeout=REQUEST_TIMEOUT,
            )

    def patch_host_status(self, obj: Obj, status: Obj) -> None:
        """Merge `status` into the host's status if the host is still at the version read."""
        meta = obj.get("metadata") or {}
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": status}
        with translated():
            self._api.patch_cluster_custom_object_status(
                c.GROUP,
                c.VERSION,
                c.HOST_PLURAL,
                self._host,
                body,
                _request_timeout=REQUEST_TIMEOUT,
            )

    def host_event(self, obj: Obj, *, reason: str, message: str, warning: bool = False) -> None:
        self._record(c.HOST_KIND, obj, reason=reason, message=message, warning=warning)
