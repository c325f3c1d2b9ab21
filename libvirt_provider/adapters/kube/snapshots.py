"""The snapshot loop's Kubernetes calls (`snapshot.store.SnapshotStore`): read a LibvirtSnapshot,
its VirtualMachine and LibvirtMachine afresh, write its status (optionally guarded by the
resourceVersion read) and its finalizer (guarded by a JSON patch test), and post Events.

Snapshots are few and seldom change, so every read goes to the API server: no copies to keep.
"""

from __future__ import annotations

from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.adapters.kube.namespaced import NamespacedStore

__all__ = ["SnapshotApi"]

Obj = dict[str, Any]


class SnapshotApi(NamespacedStore):
    """`SnapshotStore` over the API server, for the daemon serving `host`."""

    def get_snapshot(self, namespace: str, name: str) -> Obj | None:
        return self._get(c.GROUP, c.SNAPSHOT_PLURAL, namespace, name)

    def patch_snapshot_status(self, obj: Obj, status: Obj, *, conditional: bool) -> Obj:
        return self._patch_status(c.SNAPSHOT_PLURAL, obj, status, conditional=conditional)

    def set_snapshot_finalizers(self, obj: Obj, finalizers: list[str]) -> Obj:
        return self._set_finalizers(c.SNAPSHOT_PLURAL, c.SNAPSHOT_KIND, obj, finalizers)

    def event(self, obj: Any, *, reason: str, message: str, warning: bool = False) -> None:
        """Record an Event on the snapshot (repeats are counted); never raises."""
        self._record(c.SNAPSHOT_KIND, obj, reason=reason, message=message, warning=warning)
