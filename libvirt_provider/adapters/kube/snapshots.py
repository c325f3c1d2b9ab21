"""The snapshot loop's Kubernetes calls (`snapshot.store.SnapshotStore`): read a LibvirtSnapshot,
its VirtualMachine and LibvirtMachine afresh, write its status (optionally guarded by the
resourceVersion read) and its finalizer (guarded by a JSON patch test), and post Events.

Snapshots are few and seldom change, so every read goes to the API server: no copies to keep.
"""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client

from generic import constants as vmapi
from generic.adapters.events import EventRecorder
from generic.adapters.kubeclient import (
    REQUEST_TIMEOUT,
    KubeApi,
)
from libvirt_provider import constants as c
from libvirt_provider.adapters.kube.adapter import COMPONENT, patch_finalizers, translated
from libvirt_provider.errors import NotFoundError

__all__ = ["SnapshotApi"]

Obj = dict[str, Any]


class SnapshotApi:
    """`SnapshotStore` over the API server, for the daemon serving `host`."""

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

    def get_snapshot(self, namespace: str, name: str) -> Obj | None:
        return self._get(c.GROUP, c.SNAPSHOT_PLURAL, namespace, name)

    def get_virtual_machine(self, namespace: str, name: str) -> Obj | None:
        return self._get(vmapi.GROUP, vmapi.PLURAL, namespace, name)

    def get_machine(self, namespace: str, name: str) -> Obj | None:
        return self._get(c.GROUP, c.MACHINE_PLURAL, namespace, name)

    def patch_snapshot_status(self, obj: Obj, status: Obj, *, conditional: bool) -> Obj:
        meta = obj.get("metadata") or {}
        body: Obj = {"status": status}
        if conditional:
            body["metadata"] = {"resourceVersion": meta.get("resourceVersion")}
        with translated():
            written = self._api.patch_namespaced_custom_object_status(
                c.GROUP,
                c.VERSION,
                str(meta.get("namespace")),
                c.SNAPSHOT_PLURAL,
                str(meta.get("name")),
                body,
                _request_timeout=REQUEST_TIMEOUT,
            )
        return cast(Obj, written) if isinstance(written, dict) else obj

    def set_snapshot_finalizers(self, obj: Obj, finalizers: list[str]) -> Obj:
        written = patch_finalizers(
            self._api, obj, finalizers, plural=c.SNAPSHOT_PLURAL, kind=c.SNAPSHOT_KIND
        )
        return cast(Obj, written) if isinstance(written, dict) else obj

    def event(self, obj: Any, *, reason: str, message: str, warning: bool = False) -> None:
        """Record an Event on the snapshot (repeats are counted); never raises."""
        body = {**obj, "kind": c.SNAPSHOT_KIND, "apiVersion": f"{c.GROUP}/{c.VERSION}"}
        self._events.record(
            body, type_="Warning" if warning else "Normal", reason=reason, message=message
        )
