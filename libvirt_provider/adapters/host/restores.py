"""The LibvirtRestore controller's shell for one host: watch events feed a work queue, worker
threads run `RestoreReconciler` passes.

What wakes a restore: a watch event of any LibvirtRestore (all namespaces: which daemon restores
depends on its machine's host), and a slow resync. While it waits (the machine powering off,
another restore, the user) a pass asks to be looked at again within seconds, so no machine or
snapshot watch is needed. The reconciler decides whether the restore is this host's.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import kopf

from generic.background import BackgroundLoop
from generic.workqueue import WorkerPool, WorkQueue
from libvirt_provider import constants as c
from libvirt_provider.snapshot.restore import RestoreReconciler
from libvirt_provider.snapshot.restore_store import RestoreKey

__all__ = ["RestoreController", "register_restores"]

log = logging.getLogger(__name__)


class RestoreController:
    """Work queue, worker thread, and the restores known."""

    def __init__(
        self, reconciler: RestoreReconciler, *, workers: int = 1, resync_seconds: float = 300.0
    ) -> None:
        self._reconciler = reconciler
        self.queue: WorkQueue[RestoreKey] = WorkQueue(base_delay=1.0, max_delay=300.0)
        self._pool = WorkerPool(self.queue, self._process, workers=workers, name="restore")
        self._resync_seconds = resync_seconds
        self._known: set[RestoreKey] = set()
        self._lock = threading.Lock()
        self._resync = BackgroundLoop("restore-resync", self._resync_loop)

    def start(self) -> None:
        self._pool.start()
        self._resync.start()

    def stop(self) -> None:
        self._resync.stop(timeout=0)
        self.queue.shutdown()
        self._pool.stop()

    def on_restore(self, key: RestoreKey, *, deleted: bool) -> None:
        with self._lock:
            if deleted:
                self._known.discard(key)
            else:
                self._known.add(key)
        if deleted:
            self.queue.forget(key)
        else:
            self.queue.add(key)

    def wake_all(self) -> None:
        with self._lock:
            keys = list(self._known)
        for key in keys:
            self.queue.add(key)

    def _resync_loop(self, loop: BackgroundLoop) -> None:
        while not loop.pause(self._resync_seconds):
            self.wake_all()

    def _process(self, key: RestoreKey) -> None:
        self.queue.settle(key, self._reconciler.reconcile(key))


def register_restores(registry: kopf.OperatorRegistry, *, controller: RestoreController) -> None:
    """Put the restore controller's watch on the host's operator registry."""

    @kopf.on.startup(registry=registry, id="libvirt-restore/startup")
    def _start(**_: Any) -> None:
        controller.start()

    @kopf.on.cleanup(registry=registry, id="libvirt-restore/cleanup")
    def _stop(**_: Any) -> None:
        controller.stop()

    @kopf.on.event(c.GROUP, c.VERSION, c.RESTORE_PLURAL, registry=registry, id="libvirt-restore")
    def _restore(event: kopf.RawEvent, meta: kopf.Meta, **_: Any) -> None:
        if meta.namespace and meta.name:
            controller.on_restore(
                RestoreKey(meta.namespace, meta.name), deleted=event.get("type") == "DELETED"
            )
