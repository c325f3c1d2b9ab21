"""The restore loop's Kubernetes calls (`snapshot.restore_store.RestoreStore`): read a
LibvirtRestore, its snapshot, VirtualMachine and LibvirtMachine afresh, write its status and
finalizer, hold and release the machine (a status patch guarded by its resourceVersion), and post
Events on the restore and on the machine.

Restores are few and short-lived, so every read goes to the API server, as snapshots' do.
"""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client

from generic import constants as vmapi
from generic.adapters.events import EventRecorder
from generic.adapters.kubeclient import (
    JSON_PATCH,
    REQUEST_TIMEOUT,
    KubeApi,
    failed_test_raises,
    tested_replace,
)
from libvirt_provider import constants as c
from libvirt_provider.adapters.kube.adapter import COMPONENT, translated
from libvirt_provider.errors import NotFoundError, StateConflictError

__all__ = ["RestoreApi"]

Obj = dict[str, Any]


class RestoreApi:
    """`RestoreStore` over the API server, for the daemon serving `host`."""

    def __init__(self, api: client.ApiClient, *, host: str) -> None:
        self._api = KubeApi(api)
        self._events = EventRecorder(api, component=COMPONENT, instance=host, host=host)

    def _get(self, group: str, plural: str, namespace: str, name: str) -> Obj | None:
        try:
            with translated():
                return cast(
                    Obj,
                    self._api.get_namespaced_custom_object(
                        group,
                        c.VERSION if group == c.GROUP else vmapi.VERSION,
                        namespace,
                        plural,
                        name,
                        _request_timeout=REQUEST_TIMEOUT,
                    ),
                )
        except NotFoundError:
            return None

    def get_restore(self, namespace: str, name: str) -> Obj | None:
        return self._get(c.GROUP, c.RESTORE_PLURAL, namespace, name)

    def get_snapshot(self, namespace: str, name: str) -> Obj | None:
        return self._get(c.GROUP, c.SNAPSHOT_PLURAL, namespace, name)

    def get_virtual_machine(self, namespace: str, name: str) -> Obj | None:
        return self._get(vmapi.GROUP, vmapi.PLURAL, namespace, name)

    def get_machine(self, namespace: str, name: str) -> Obj | None:
        return self._get(c.GROUP, c.MACHINE_PLURAL, namespace, name)

    def _patch_status(self, plural: str, obj: Obj, body: Obj) -> Obj:
        meta = obj.get("metadata") or {}
        with translated():
            written = self._api.patch_namespaced_custom_object_status(
                c.GROUP,
                c.VERSION,
                str(meta.get("namespace")),
                plural,
                str(meta.get("name")),
                body,
                _request_timeout=REQUEST_TIMEOUT,
            )
        return cast(Obj, written) if isinstance(written, dict) else obj

    def patch_restore_status(self, obj: Obj, status: Obj, *, conditional: bool) -> Obj:
        body: Obj = {"status": status}
        if conditional:
            body["metadata"] = {
                "resourceVersion": (obj.get("metadata") or {}).get("resourceVersion")
            }
        return self._patch_status(c.RESTORE_PLURAL, obj, body)

    def patch_machine_status(self, machine: Obj, patch: Obj) -> Obj:
        version = (machine.get("metadata") or {}).get("resourceVersion")
        body: Obj = {"metadata": {"resourceVersion": version}, "status": patch}
        return self._patch_status(c.MACHINE_PLURAL, machine, body)

    def set_restore_finalizers(self, obj: Obj, finalizers: list[str]) -> Obj:
        meta = obj.get("metadata") or {}
        ops = tested_replace("/metadata/finalizers", meta.get("finalizers"), finalizers)
        changed = (
            f"{c.RESTORE_KIND} {meta.get('namespace')}/{meta.get('name')}: its finalizers "
            "changed meanwhile"
        )
        with translated(), failed_test_raises(lambda: StateConflictError(changed)):
            written = self._api.patch_namespaced_custom_object(
                c.GROUP,
                c.VERSION,
                str(meta.get("namespace")),
                c.RESTORE_PLURAL,
                str(meta.get("name")),
                ops,
                _content_type=JSON_PATCH,
                _request_timeout=REQUEST_TIMEOUT,
            )
        return cast(Obj, written) if isinstance(written, dict) else obj

    def event(self, obj: Any, *, reason: str, message: str, warning: bool = False) -> None:
        """Record an Event on the restore (repeats are counted); never raises."""
        body = {**obj, "kind": c.RESTORE_KIND, "apiVersion": f"{c.GROUP}/{c.VERSION}"}
        self._events.record(
            body, type_="Warning" if warning else "Normal", reason=reason, message=message
        )

    def machine_event(self, machine: Obj, *, reason: str, message: str) -> None:
        """Record an Event on the LibvirtMachine; never raises."""
        body = {**machine, "kind": c.MACHINE_KIND, "apiVersion": f"{c.GROUP}/{c.VERSION}"}
        self._events.record(body, type_="Normal", reason=reason, message=message)
