"""The LibvirtSnapshot controller's shell for one host: watch events feed a work queue, worker
threads run `SnapshotReconciler` passes.

What wakes a snapshot: a watch event of any LibvirtSnapshot (all namespaces: which daemon takes
a snapshot depends on its machine's host, not on a field of the snapshot), a change of the
VirtualMachine a snapshot names (it may appear, be linked, be placed), and a slow resync. The
reconciler decides whether the snapshot is this host's; the others' passes end at once.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import kopf

from generic import constants as vmapi
from generic.keyed import KeyedWorkers
from generic.workqueue import WorkQueue
from libvirt_provider import constants as c
from libvirt_provider.snapshot.reconciler import SnapshotReconciler
from libvirt_provider.snapshot.store import SnapshotKey

__all__ = ["SnapshotController", "register_snapshots"]

log = logging.getLogger(__name__)


class SnapshotController:
    """Work queue, worker threads, and which snapshots name which VM."""

    def __init__(
        self, reconciler: SnapshotReconciler, *, workers: int = 2, resync_seconds: float = 300.0
    ) -> None:
        self._by_vm: dict[tuple[str, str], set[SnapshotKey]] = {}
        self._known: dict[SnapshotKey, tuple[str, str]] = {}
        self._lock = threading.Lock()
        # Failures back off from 1 s to 5 minutes, as machines do.
        # Looked up per pass, not bound here: unit tests build controllers on stand-ins.
        self._workers = KeyedWorkers(
            lambda key: reconciler.reconcile(key),  # noqa: PLW0108
            self._known_keys,
            name="snapshot",
            workers=workers,
            resync_seconds=resync_seconds,
        )
        self.queue: WorkQueue[SnapshotKey] = self._workers.queue

    def start(self) -> None:
        self._workers.start()

    def stop(self) -> None:
        self._workers.stop()

    def on_snapshot(self, key: SnapshotKey, vm_name: str | None, *, deleted: bool) -> None:
        with self._lock:
            before = self._known.pop(key, None)
            if before is not None:
                self._by_vm.get(before, set()).discard(key)
            if not deleted and vm_name:
                vm = (key.namespace, vm_name)
                self._known[key] = vm
                self._by_vm.setdefault(vm, set()).add(key)
        if deleted:
            self.queue.forget(key)
        else:
            self.queue.add(key)

    def on_vm(self, namespace: str, name: str) -> None:
        with self._lock:
            keys = list(self._by_vm.get((namespace, name), ()))
        for key in keys:
            self.queue.add(key)

    def wake_all(self) -> None:
        self._workers.wake_all()

    def _known_keys(self) -> list[SnapshotKey]:
        with self._lock:
            return list(self._known)


def register_snapshots(registry: kopf.OperatorRegistry, *, controller: SnapshotController) -> None:
    """Put the snapshot controller's watches on the host's operator registry."""

    @kopf.on.startup(registry=registry, id="libvirt-snapshot/startup")
    def _start(**_: Any) -> None:
        controller.start()

    @kopf.on.cleanup(registry=registry, id="libvirt-snapshot/cleanup")
    def _stop(**_: Any) -> None:
        controller.stop()

    @kopf.on.event(c.GROUP, c.VERSION, c.SNAPSHOT_PLURAL, registry=registry, id="libvirt-snapshot")
    def _snapshot(event: kopf.RawEvent, spec: kopf.Spec, meta: kopf.Meta, **_: Any) -> None:
        if not meta.namespace or not meta.name:
            return
        vm_name = spec.get("virtualMachineName")
        controller.on_snapshot(
            SnapshotKey(meta.namespace, meta.name),
            str(vm_name) if vm_name else None,
            deleted=event.get("type") == "DELETED",
        )

    @kopf.on.event(
        vmapi.GROUP, vmapi.VERSION, vmapi.PLURAL, registry=registry, id="libvirt-snapshot/vm"
    )
    def _vm(meta: kopf.Meta, **_: Any) -> None:
        if meta.namespace and meta.name:
            controller.on_vm(meta.namespace, meta.name)
