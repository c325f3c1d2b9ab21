"""What the stores of the few, short-lived kinds (snapshots, restores, migrations) share: fresh
reads of namespaced objects, lists across namespaces, status patches, the one finalizer patch,
and Events.

These kinds are read afresh on every pass (no copies to keep), so each store is a thin list of
the calls its loop makes; the calls themselves are written once here.
"""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client

from generic import constants as vmapi
from generic.adapters.events import EventRecorder
from generic.adapters.kubeclient import REQUEST_TIMEOUT, KubeApi
from libvirt_provider import constants as c
from libvirt_provider.adapters.kube.adapter import COMPONENT, patch_finalizers, translated
from libvirt_provider.errors import NotFoundError

__all__ = ["NamespacedStore"]

Obj = dict[str, Any]


class NamespacedStore:
    """Reads and writes of namespaced objects, for the daemon serving `host`."""

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

    def _list(
        self, plural: str, *, field_selector: str | None = None, label_selector: str | None = None
    ) -> list[Obj]:
        """Every object of `plural` (this project's group) in every namespace, as selected."""
        with translated():
            listing = cast(
                Obj,
                self._api.list_cluster_custom_object(
                    c.GROUP,
                    c.VERSION,
                    plural,
                    field_selector=field_selector,
                    label_selector=label_selector,
                    _request_timeout=REQUEST_TIMEOUT,
                ),
            )
        return list(listing.get("items") or [])

    def get_virtual_machine(self, namespace: str, name: str) -> Obj | None:
        return self._get(vmapi.GROUP, vmapi.PLURAL, namespace, name)

    def get_machine(self, namespace: str, name: str) -> Obj | None:
        return self._get(c.GROUP, c.MACHINE_PLURAL, namespace, name)

    def _patch_status(
        self, plural: str, obj: Obj, status: Obj, *, conditional: bool = False
    ) -> Obj:
        """Merge `status` into the object's status; `conditional`: only if the object is still
        at the resourceVersion read (a conflict otherwise)."""
        meta = obj.get("metadata") or {}
        body: Obj = {"status": status}
        if conditional:
            body["metadata"] = {"resourceVersion": meta.get("resourceVersion")}
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

    def _set_finalizers(self, plural: str, kind: str, obj: Obj, finalizers: list[str]) -> Obj:
        written = patch_finalizers(self._api, obj, finalizers, plural=plural, kind=kind)
        return cast(Obj, written) if isinstance(written, dict) else obj

    def _record(
        self, kind: str, obj: Any, *, reason: str, message: str, warning: bool = False
    ) -> None:
        """Record an Event on `obj`, one of this group's `kind` (repeats are counted); never
        raises."""
        body = {**obj, "kind": kind, "apiVersion": f"{c.GROUP}/{c.VERSION}"}
        self._events.record(
            body, type_="Warning" if warning else "Normal", reason=reason, message=message
        )
