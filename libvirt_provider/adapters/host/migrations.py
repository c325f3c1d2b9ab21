"""The LibvirtMigration controller's shell for one host: watch events feed a work queue, worker
threads run `MigrationReconciler` passes.

Every daemon watches every migration (all namespaces): whether this host acts depends on the
migration's status (its source and target), which the other daemon writes. The reconciler
decides; the passes of the other hosts' migrations end at once. A slow resync catches what a
lost event would leave waiting.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import kopf

from generic.background import BackgroundLoop
from generic.workqueue import WorkerPool, WorkQueue
from libvirt_provider import constants as c
from libvirt_provider.migration.reconciler import MigrationReconciler
from libvirt_provider.migration.store import MigrationKey

__all__ = ["MigrationController", "register_migrations"]

log = logging.getLogger(__name__)


class MigrationController:
    """Work queue, worker threads, and the migrations seen."""

    def __init__(
        self, reconciler: MigrationReconciler, *, workers: int = 2, resync_seconds: float = 60.0
    ) -> None:
        self._reconciler = reconciler
        self.queue: WorkQueue[MigrationKey] = WorkQueue(base_delay=1.0, max_delay=60.0)
        # A running copy holds its worker for its whole length: two let another migration's
        # step (a target's preparation) go on meanwhile.
        self._pool = WorkerPool(self.queue, self._process, workers=workers, name="migration")
        self._resync_seconds = resync_seconds
        self._known: set[MigrationKey] = set()
        self._lock = threading.Lock()
        self._resync = BackgroundLoop("migration-resync", self._resync_loop)

    def start(self) -> None:
        self._pool.start()
        self._resync.start()

    def stop(self) -> None:
        self._resync.stop(timeout=0)
        self.queue.shutdown()
        self._pool.stop()

    def on_migration(self, key: MigrationKey, *, deleted: bool) -> None:
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

    def _process(self, key: MigrationKey) -> None:
        self.queue.settle(key, self._reconciler.reconcile(key))


def register_migrations(
    registry: kopf.OperatorRegistry, *, controller: MigrationController
) -> None:
    """Put the migration controller's watch on the host's operator registry."""

    @kopf.on.startup(registry=registry, id="libvirt-migration/startup")
    def _start(**_: Any) -> None:
        controller.start()

    @kopf.on.cleanup(registry=registry, id="libvirt-migration/cleanup")
    def _stop(**_: Any) -> None:
        controller.stop()

    @kopf.on.event(
        c.GROUP, c.VERSION, c.MIGRATION_PLURAL, registry=registry, id="libvirt-migration"
    )
    def _migration(event: kopf.RawEvent, meta: kopf.Meta, **_: Any) -> None:
        if meta.namespace and meta.name:
            controller.on_migration(
                MigrationKey(meta.namespace, meta.name), deleted=event.get("type") == "DELETED"
            )
