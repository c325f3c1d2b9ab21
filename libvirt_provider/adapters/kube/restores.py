"""The restore loop's Kubernetes calls (`snapshot.restore_store.RestoreStore`): read a
LibvirtRestore, its snapshot, VirtualMachine and LibvirtMachine afresh, write its status and
finalizer, hold and release the machine (a status patch guarded by its resourceVersion), and post
Events on the restore and on the machine.

Restores are few and short-lived, so every read goes to the API server, as snapshots' do.
"""

from __future__ import annotations

from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.adapters.kube.namespaced import NamespacedStore

__all__ = ["RestoreApi"]

Obj = dict[str, Any]


class RestoreApi(NamespacedStore):
    """`RestoreStore` over the API server, for the daemon serving `host`."""

    def get_restore(self, namespace: str, name: str) -> Obj | None:
        return self._get(c.GROUP, c.RESTORE_PLURAL, namespace, name)

    def get_snapshot(self, namespace: str, name: str) -> Obj | None:
        return self._get(c.GROUP, c.SNAPSHOT_PLURAL, namespace, name)

    def patch_restore_status(self, obj: Obj, status: Obj, *, conditional: bool) -> Obj:
        return self._patch_status(c.RESTORE_PLURAL, obj, status, conditional=conditional)

    def patch_machine_status(self, machine: Obj, patch: Obj) -> Obj:
        return self._patch_status(c.MACHINE_PLURAL, machine, patch, conditional=True)

    def set_restore_finalizers(self, obj: Obj, finalizers: list[str]) -> Obj:
        return self._set_finalizers(c.RESTORE_PLURAL, c.RESTORE_KIND, obj, finalizers)

    def event(self, obj: Any, *, reason: str, message: str, warning: bool = False) -> None:
        """Record an Event on the restore (repeats are counted); never raises."""
        self._record(c.RESTORE_KIND, obj, reason=reason, message=message, warning=warning)

    def machine_event(self, machine: Obj, *, reason: str, message: str) -> None:
        """Record an Event on the LibvirtMachine; never raises."""
        self._record(c.MACHINE_KIND, machine, reason=reason, message=message)
