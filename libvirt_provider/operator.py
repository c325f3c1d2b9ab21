"""The LibvirtMachine controller's shell: kopf watches feed a work queue, threads reconcile.

What wakes a machine's reconcile, so changes arrive promptly rather than by polling:

- a watch event of a LibvirtMachine on this host (server-side label selector on the host label,
  so each daemon sees only its own machines);
- a watch event of a VirtualMachine whose `spec.infrastructureRef` names a LibvirtMachine (the
  generic VM carries the portable intent: power, size, image);
- a watch event of any catalog object (images, classes, networks, storage classes), which wakes
  every machine of this host;
- a libvirt lifecycle event of a domain (started, stopped, crashed, saved), mapped back to its
  machine by domain UUID (= the LibvirtMachine's uid);
- a reconnect to libvirtd (events may have been missed) and a slow resync, only a safety net.

kopf's own finalizer and progress annotations are not used: handlers are plain event handlers,
and the provider's finalizer is managed by the reconciler.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import kopf

from catalog.constants import GROUP, VERSION
from generic import constants as vmapi
from generic.workqueue import WorkerPool, WorkQueue
from libvirt_provider import constants as c
from libvirt_provider.reconciler import MachineKey, MachineReconciler

__all__ = ["MachineController", "configure_settings", "register"]

log = logging.getLogger(__name__)

KOPF_PREFIX = "provider.infrastructure.vm-api.io"


def configure_settings(settings: kopf.OperatorSettings) -> None:
    """kopf settings of the provider's operator: its own names, and watches that self-heal."""
    settings.persistence.finalizer = f"{KOPF_PREFIX}/kopf-finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_PREFIX, key="last-handled-configuration"
    )
    settings.watching.server_timeout = 240
    settings.watching.client_timeout = 270
    settings.watching.connect_timeout = 10
    settings.posting.level = logging.WARNING


class MachineController:
    """Work queue, worker threads, and the maps from watch events to machine keys."""

    def __init__(
        self, reconciler: MachineReconciler, *, workers: int = 4, resync_seconds: float = 300.0
    ) -> None:
        self._reconciler = reconciler
        self.queue: WorkQueue[MachineKey] = WorkQueue()
        self._pool = WorkerPool(self.queue, self._process, workers=workers, name="machine")
        self._resync_seconds = resync_seconds
        self._known: dict[MachineKey, str] = {}
        self._by_uid: dict[str, MachineKey] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._resync = threading.Thread(target=self._resync_loop, name="resync", daemon=True)

    def start(self) -> None:
        self._pool.start()
        self._resync.start()

    def stop(self) -> None:
        self._stop.set()
        self.queue.shutdown()
        self._pool.stop()

    def on_machine(self, namespace: str, name: str, uid: str | None, *, deleted: bool) -> None:
        key = MachineKey(namespace, name)
        with self._lock:
            if deleted:
                self._known.pop(key, None)
            elif uid:
                self._known[key] = uid
                self._by_uid[uid] = key
        if not deleted:
            self.queue.add(key)

    def on_linked_vm(self, key: MachineKey) -> None:
        """A VM naming `key` changed; wake it if it is one of this host's machines."""
        with self._lock:
            known = key in self._known
        if known:
            self.queue.add(key)

    def on_domain_event(self, uuid: str) -> None:
        with self._lock:
            key = self._by_uid.get(uuid)
        if key is not None:
            self.queue.add(key)

    def wake_all(self) -> None:
        with self._lock:
            keys = list(self._known)
        for key in keys:
            self.queue.add(key)

    def _resync_loop(self) -> None:
        while not self._stop.wait(self._resync_seconds):
            self.wake_all()

    def _process(self, key: MachineKey) -> None:
        delay = self._reconciler.reconcile(key)
        self.queue.forget(key)
        if delay is not None:
            self.queue.add_after(key, delay)


def register(registry: kopf.OperatorRegistry, *, controller: MachineController, host: str) -> None:
    """Put the LibvirtMachine controller's watches on `registry`."""
    on_host = {c.HOST_LABEL: host}

    @kopf.on.startup(registry=registry, id="libvirt-machine/startup")
    def _start(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure_settings(settings)
        controller.start()

    @kopf.on.cleanup(registry=registry, id="libvirt-machine/cleanup")
    def _stop(**_: Any) -> None:
        controller.stop()

    @kopf.on.event(
        GROUP, VERSION, c.MACHINE_PLURAL, labels=on_host, registry=registry, id="libvirt-machine"
    )
    def _machine(event: kopf.RawEvent, meta: kopf.Meta, **_: Any) -> None:
        if meta.namespace and meta.name:
            controller.on_machine(
                meta.namespace, meta.name, meta.uid, deleted=event.get("type") == "DELETED"
            )

    @kopf.on.event(
        vmapi.GROUP, vmapi.VERSION, vmapi.PLURAL, registry=registry, id="libvirt-machine/vm"
    )
    def _vm(spec: kopf.Spec, meta: kopf.Meta, **_: Any) -> None:
        ref = spec.get("infrastructureRef") or {}
        if ref.get("apiGroup") == GROUP and ref.get("kind") == c.MACHINE_KIND and meta.namespace:
            controller.on_linked_vm(MachineKey(meta.namespace, str(ref.get("name"))))

    for plural in (
        c.IMAGE_PLURAL,
        c.MACHINE_CLASS_PLURAL,
        c.NETWORK_PLURAL,
        c.STORAGE_CLASS_PLURAL,
    ):

        @kopf.on.event(GROUP, VERSION, plural, registry=registry, id=f"libvirt-machine/{plural}")
        def _catalog(**_: Any) -> None:
            controller.wake_all()
