"""The LibvirtMigration controller's shell for one host: watch events feed a work queue, worker
threads run `MigrationReconciler` passes.

Every daemon watches every migration (all namespaces): whether this host acts depends on the
migration's status (its source and target), which the other daemon writes. The reconciler
decides; the passes of the other hosts' migrations end at once. A slow resync catches what a
lost event would leave waiting. A migration that ends (any host's) frees a slot: the migrations
this host holds back for one are woken then (docs/migration.md, "Limits and ends").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import kopf

from generic.keyed import KeyedWorkers
from generic.workqueue import WorkQueue
from libvirt_provider import constants as c
from libvirt_provider.migration.reconciler import MigrationReconciler
from libvirt_provider.migration.store import MigrationKey

__all__ = ["MigrationController", "register_migrations"]

log = logging.getLogger(__name__)

_ENDED = frozenset(
    {c.MIGRATION_PHASE_SUCCEEDED, c.MIGRATION_PHASE_FAILED, c.MIGRATION_PHASE_CANCELLED}
)


class MigrationController:
    """The migrations seen, and the keyed workers that run their passes."""

    def __init__(
        self,
        reconciler: MigrationReconciler,
        *,
        workers: int | None = None,
        resync_seconds: float = 60.0,
    ) -> None:
        # Told of every migration event (the host's drain follows its migrations).
        self.on_change: Callable[[], None] = lambda: None
        self._known: set[MigrationKey] = set()
        self._lock = threading.Lock()
        self._reconciler = reconciler
        # A running copy holds its worker for its whole length: one more worker than the
        # host's outbound limit lets other migrations' steps (a target's preparation, a wait
        # for a slot) go on meanwhile. Looked up per pass, not bound here.
        if workers is None:
            workers = reconciler.limits.per_host + 1
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

    def on_migration(self, key: MigrationKey, *, deleted: bool, ended: bool = False) -> None:
        with self._lock:
            if deleted:
                self._known.discard(key)
            else:
                self._known.add(key)
        if deleted:
            self.queue.forget(key)
        else:
            self.queue.add(key)
        self.on_change()
        if deleted or ended:
            # A slot may have freed: those waiting for one look again (a few keys at most).
            for waiting in self._reconciler.waiting():
                if waiting != key:
                    self.queue.add(waiting)

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
    def _migration(event: kopf.RawEvent, meta: kopf.Meta, status: kopf.Status, **_: Any) -> None:
        if meta.namespace and meta.name:
            controller.on_migration(
                MigrationKey(meta.namespace, meta.name),
                deleted=event.get("type") == "DELETED",
                ended=status.get("phase") in _ENDED,
            )
