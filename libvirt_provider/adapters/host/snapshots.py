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
from generic.background import BackgroundLoop
from generic.workqueue import WorkerPool, WorkQueue
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
        self._reconciler = reconciler
        # Failures back off from 1 s to 5 minutes, as machines do.
        self.queue: WorkQueue[SnapshotKey] = WorkQueue(base_delay=1.0, max_delay=300.0)
        self._pool = WorkerPool(self.queue, self._process, workers=workers, name="snapshot")
        self._resync_seconds = resync_seconds
        self._by_vm: dict[tuple[str, str], set[SnapshotKey]] = {}
        self._known: dict[SnapshotKey, tuple[str, str]] = {}
        self._lock = threading.Lock()
        self._resync = BackgroundLoop("snapshot-resync", self._resync_loop)

    def start(self) -> None:
        self._pool.start()
        self._resync.start()

    def stop(self) -> None:
        self._resync.stop(timeout=0)
        self.queue.shutdown()
        self._pool.stop()

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
        with self._lock:
            keys = list(self._known)
        for key in keys:
            self.queue.add(key)

    def _resync_loop(self, loop: BackgroundLoop) -> None:
        while not loop.pause(self._resync_seconds):
            self.wake_all()

    def _process(self, key: SnapshotKey) -> None:
        self.queue.settle(key, self._reconciler.reconcile(key))


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
