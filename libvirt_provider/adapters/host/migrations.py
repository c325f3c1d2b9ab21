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

from generic.keyed import KeyedWorkers
from generic.workqueue import WorkQueue
from libvirt_provider import constants as c
from libvirt_provider.migration.reconciler import MigrationReconciler
from libvirt_provider.migration.store import MigrationKey

__all__ = ["MigrationController", "register_migrations"]

log = logging.getLogger(__name__)


class MigrationController:
    """The migrations seen, and the keyed workers that run their passes."""

    def __init__(
        self, reconciler: MigrationReconciler, *, workers: int = 2, resync_seconds: float = 60.0
    ) -> None:
        self._known: set[MigrationKey] = set()
        self._lock = threading.Lock()
        # A running copy holds its worker for its whole length: two let another migration's
        # step (a target's preparation) go on meanwhile. Looked up per pass, not bound here.
        self._workers = KeyedWorkers(
            lambda key: reconciler.reconcile(key),  # noqa: PLW0108
            self._known_keys,
            name="migration",
            workers=workers,
            resync_seconds=resync_seconds,
            max_delay=60.0,
        )
        self.queue: WorkQueue[MigrationKey] = self._workers.queue

    def start(self) -> None:
        self._workers.start()

    def stop(self) -> None:
        self._workers.stop()

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
        self._workers.wake_all()

    def _known_keys(self) -> list[MigrationKey]:
        with self._lock:
            return list(self._known)


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
