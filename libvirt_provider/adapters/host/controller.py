"""The LibvirtMachine controller's shell: kopf watches feed a work queue, threads reconcile.

What wakes a machine's reconcile, so changes arrive promptly rather than by polling:

- a watch event of a LibvirtMachine on this host (server-side field selector on spec.host, so
  each daemon sees only its own machines, whatever their labels say);
- a watch event of a VirtualMachine whose `spec.infrastructureRef` names a LibvirtMachine (the
  generic VM carries the portable intent: power, size, image);
- a change of any catalog object (images, classes, networks, storage classes, Kubernetes'
  VolumeAttributesClasses), from the catalog informers that also serve the passes' reads
  (`catalog_listener`), which wakes every machine of this host; for images only when the spec
  changed or the image went, since every host writes import progress into image status and that
  means nothing to a machine;
- a libvirt lifecycle event of a domain (started, stopped, crashed, saved), mapped back to its
  machine by domain UUID (= the LibvirtMachine's uid);
- a reconnect to libvirtd (events may have been missed) and a slow resync, only a safety net.

The host's image cache (`image_cache.py`) is asked for a pass when an image's spec changes or the
image is deleted, and when one of this host's machines is gone (its finalizer was removed, so its
volumes are too): both can leave a cached base unused.

kopf's own finalizer and progress annotations are not used: handlers are plain event handlers,
and the provider's finalizer is managed by the reconciler.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Final

import kopf
from prometheus_client import Gauge, Histogram

from catalog.constants import GROUP, VERSION
from generic import constants as vmapi
from generic.adapters.controller import vm_fingerprint
from generic.adapters.operator import configure_settings as configure_generic_settings
from generic.keyed import KeyedWorkers
from generic.lean import user_edit_mark
from generic.workqueue import WorkQueue
from libvirt_provider import constants as c
from libvirt_provider.adapters.kube.adapter import KubeAdapter
from libvirt_provider.images.cache import ImageCache
from libvirt_provider.machine.reconciler import MachineKey, MachineReconciler

__all__ = [
    "MachineController",
    "SpecChanges",
    "catalog_listener",
    "configure_settings",
    "machine_fingerprint",
    "register",
]

log = logging.getLogger(__name__)

KOPF_PREFIX = "provider.infrastructure.vm-api.io"

QUEUE_DEPTH: Final = Gauge(
    "vmapi_libvirt_machine_queue_depth",
    "LibvirtMachines of the host waiting to be reconciled, those waiting out a backoff included.",
    ["host"],
)

RECONCILE_SECONDS: Final = Histogram(
    "vmapi_libvirt_machine_reconcile_duration_seconds",
    "Time one reconcile of a LibvirtMachine took, its API and libvirt calls included.",
    ["host"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)


def configure_settings(settings: kopf.OperatorSettings, *, host: str) -> None:
    """kopf settings of the provider's operator: the generic controller's, under its own names,
    and this host's machines selected by the API server.

    Server-side, by a field selector on spec.host (a selectable field of the CRD): the daemon
    streams only its own host's machines, and since spec.host is immutable once set, no edit of
    the host label can hide one of them from it (a machine appears when its spec.host is set).
    """
    configure_generic_settings(settings, prefix=KOPF_PREFIX)
    settings.watching.field_selectors[GROUP, c.MACHINE_PLURAL] = f"{c.HOST_FIELD}={host}"


class MachineController:
    """Work queue, worker threads, and the maps from watch events to machine keys."""

    def __init__(
        self,
        reconciler: MachineReconciler,
        *,
        workers: int = 4,
        resync_seconds: float = 300.0,
        host: str | None = None,
    ) -> None:
        self._host = host
        self._known: dict[MachineKey, str] = {}
        self._by_uid: dict[str, MachineKey] = {}
        self._lock = threading.Lock()

        def reconcile(key: MachineKey) -> Any:
            # Looked up per pass, not bound here: unit tests build controllers on stand-ins.
            started = time.monotonic()
            try:
                return reconciler.reconcile(key)
            finally:
                if host is not None:
                    RECONCILE_SECONDS.labels(host=host).observe(time.monotonic() - started)

        self._workers = KeyedWorkers(
            reconcile,
            self._known_keys,
            name="machine",
            workers=workers,
            resync_seconds=resync_seconds,
        )
        self.queue: WorkQueue[MachineKey] = self._workers.queue

    def start(self) -> None:
        if self._host is not None:
            QUEUE_DEPTH.labels(host=self._host).set_function(lambda: len(self.queue))
        self._workers.start()

    def stop(self) -> None:
        self._workers.stop()
        if self._host is not None:
            # A host this daemon no longer serves (a remote host's Lease lost) leaves no series.
            with contextlib.suppress(KeyError):
                QUEUE_DEPTH.remove(self._host)
            with contextlib.suppress(KeyError):
                RECONCILE_SECONDS.remove(self._host)

    def on_machine(self, namespace: str, name: str, uid: str | None, *, deleted: bool) -> None:
        key = MachineKey(namespace, name)
        with self._lock:
            if deleted:
                gone = self._known.pop(key, None)
                if gone is not None:
                    self._by_uid.pop(gone, None)
            elif uid:
                self._known[key] = uid
                self._by_uid[uid] = key
        if not deleted:
            self.queue.add(key)

    def knows(self, key: MachineKey) -> bool:
        """Whether `key` is one of this host's machines (seen on its watch)."""
        with self._lock:
            return key in self._known

    def on_linked_vm(self, key: MachineKey) -> None:
        """A VM naming `key` changed; wake it if it is one of this host's machines."""
        with self._lock:
            known = key in self._known
        if known:
            self.queue.add(key)

    def on_relisted(self, key: MachineKey) -> None:
        """A fresh list showed `key` unchanged. A machine whose passes were failing meanwhile
        (most likely on the API server that has just answered the list) is retried now: its
        backoff grew during the outage and could otherwise hold it for up to five minutes."""
        with self._lock:
            known = key in self._known
        if known and self.queue.failures(key):
            self.queue.add(key)

    def on_domain_event(self, uuid: str) -> None:
        with self._lock:
            key = self._by_uid.get(uuid)
        if key is not None:
            self.queue.add(key)

    def wake(self, keys: list[MachineKey]) -> None:
        """Wake these machines now (those the host refused, when it may admit them now)."""
        self._workers.wake(keys)

    def wake_all(self) -> None:
        self._workers.wake_all()

    def _known_keys(self) -> list[MachineKey]:
        with self._lock:
            return list(self._known)


class SpecChanges:
    """Tells watch events that change an object's spec (or remove it) from status-only ones.

    A custom resource with a status subresource bumps `metadata.generation` only for spec changes.
    """

    def __init__(self) -> None:
        self._seen: dict[str, int | None] = {}
        self._lock = threading.Lock()

    def changed(self, name: str, generation: int | None, *, deleted: bool) -> bool:
        with self._lock:
            if deleted:
                self._seen.pop(name, None)
                return True
            known = name in self._seen
            before = self._seen.get(name)
            self._seen[name] = generation
        return not known or generation is None or generation != before


def _listed(event: kopf.RawEvent) -> bool:
    """Whether kopf delivers the object from a fresh list (type None), as it does when a watch
    starts over: at start-up, and after an API server outage longer than its retries."""
    return event.get("type") is None


def machine_fingerprint(
    meta: Mapping[str, Any], status: Mapping[str, Any] | None = None
) -> Hashable:
    """What of a LibvirtMachine its reconcile depends on, beyond its spec (whose changes move
    `generation`): its metadata, and of its status the parts others write, the placer's
    preemption, a LibvirtRestore's hold and a LibvirtMigration's lock (its release lets a
    machine deleted during the migration go at once). An event that changes none of it is the
    echo of a status write (this daemon's own): reconciling on it would turn every failed pass
    into an immediate retry."""
    preemption = (status or {}).get("preemption")
    hold = (status or {}).get("restore")
    restore = hold.get("uid") if isinstance(hold, Mapping) else None
    lock = (status or {}).get("migration")
    return (vm_fingerprint(meta), user_edit_mark(meta), repr(preemption), restore, repr(lock))


def _status_of(event: kopf.RawEvent) -> Mapping[str, Any] | None:
    raw = event.get("object")
    status = raw.get("status") if isinstance(raw, Mapping) else None
    return status if isinstance(status, Mapping) else None


class _Fingerprints:
    """The last fingerprint seen per object, to tell events worth a reconcile from echoes."""

    def __init__(
        self, fingerprint: Callable[[Mapping[str, Any], Mapping[str, Any] | None], Hashable]
    ) -> None:
        self._fingerprint = fingerprint
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], Hashable] = {}

    def changed(self, key: tuple[str, str], event: kopf.RawEvent, meta: kopf.Meta) -> bool:
        with self._lock:
            if event.get("type") == "DELETED":
                self._seen.pop(key, None)
                return True
            fingerprint = self._fingerprint(meta, _status_of(event))
            before = self._seen.get(key)
            self._seen[key] = fingerprint
        return before != fingerprint


def register(
    registry: kopf.OperatorRegistry,
    *,
    controller: MachineController,
    host: str,
    images: ImageCache,
    store: KubeAdapter,
) -> None:
    """Put the LibvirtMachine controller's watches on `registry`; every event also refreshes the
    store's copy of the object (the reconciler's reads)."""

    @kopf.on.startup(registry=registry, id="libvirt-machine/startup")
    def _start(**_: Any) -> None:
        controller.start()

    @kopf.on.cleanup(registry=registry, id="libvirt-machine/cleanup")
    def _stop(**_: Any) -> None:
        controller.stop()

    _watch_machines(registry, controller=controller, host=host, images=images, store=store)
    _watch_virtual_machines(registry, controller=controller, store=store)


def _watch_machines(
    registry: kopf.OperatorRegistry,
    *,
    controller: MachineController,
    host: str,
    images: ImageCache,
    store: KubeAdapter,
) -> None:
    machine_events = _Fingerprints(machine_fingerprint)

    @kopf.on.event(
        GROUP,
        VERSION,
        c.MACHINE_PLURAL,
        registry=registry,
        id="libvirt-machine",
    )
    def _machine(event: kopf.RawEvent, meta: kopf.Meta, **_: Any) -> None:
        deleted = event.get("type") == "DELETED"
        raw = event.get("object")
        if isinstance(raw, dict):
            # Before the wake-up below: the pass it starts reads this copy.
            store.observe_machine(dict(raw), deleted=deleted)
        if not meta.namespace or not meta.name:
            return
        if machine_events.changed((meta.namespace, meta.name), event, meta):
            controller.on_machine(meta.namespace, meta.name, meta.uid, deleted=deleted)
        elif _listed(event):
            controller.on_relisted(MachineKey(meta.namespace, meta.name))
        if deleted:
            images.request_pass()


def _watch_virtual_machines(
    registry: kopf.OperatorRegistry, *, controller: MachineController, store: KubeAdapter
) -> None:
    vm_events = _Fingerprints(lambda meta, _status: vm_fingerprint(meta))

    @kopf.on.event(
        vmapi.GROUP, vmapi.VERSION, vmapi.PLURAL, registry=registry, id="libvirt-machine/vm"
    )
    def _vm(event: kopf.RawEvent, spec: kopf.Spec, meta: kopf.Meta, **_: Any) -> None:
        ref = spec.get("infrastructureRef") or {}
        if ref.get("apiGroup") != GROUP or ref.get("kind") != c.MACHINE_KIND or not meta.namespace:
            return
        machine = MachineKey(meta.namespace, str(ref.get("name")))
        raw = event.get("object")
        if isinstance(raw, dict):
            store.observe_vm(
                dict(raw), deleted=event.get("type") == "DELETED", wanted=controller.knows(machine)
            )
        # The generic controller mirrors every machine status write into the VM's status; such
        # an event changes nothing the machine's reconcile reads (spec, identity, deletion).
        if vm_events.changed((meta.namespace, str(meta.name)), event, meta):
            controller.on_linked_vm(machine)
        elif _listed(event):
            controller.on_relisted(machine)


def catalog_listener(
    plural: str, *, controller: MachineController, images: ImageCache
) -> Callable[[str, Mapping[str, Any] | None], None]:
    """What a change of one catalog kind wakes, for that kind's informer (which also serves the
    reads, so the machines woken see the change).

    Any change of a class, network or storage class wakes every machine. For snapshots, only a
    change of what a clone reads (ready, deleted, host, disks) does: a snapshot being taken
    writes its status several times. For images, only a change of spec or a deletion does (the
    hosts' import entries in their status change all the time), and it also asks the image cache
    for a pass.
    """
    if plural == c.SNAPSHOT_PLURAL:
        return _snapshot_listener(controller)
    if plural != c.IMAGE_PLURAL:
        return lambda _type, _obj: controller.wake_all()
    image_specs = SpecChanges()

    def on_image(event_type: str, obj: Mapping[str, Any] | None) -> None:
        meta = (obj or {}).get("metadata") or {}
        generation = meta.get("generation")
        if obj is None or image_specs.changed(
            str(meta.get("name")),
            generation if isinstance(generation, int) else None,
            deleted=event_type == "DELETED",
        ):
            controller.wake_all()
            images.request_pass()

    return on_image


def _snapshot_listener(
    controller: MachineController,
) -> Callable[[str, Mapping[str, Any] | None], None]:
    """Wakes every machine when a snapshot becomes usable for clones or stops being so."""
    seen: dict[tuple[str, str], Hashable] = {}
    lock = threading.Lock()

    def on_snapshot(event_type: str, obj: Mapping[str, Any] | None) -> None:
        meta = (obj or {}).get("metadata") or {}
        status = (obj or {}).get("status") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        mark = (
            status.get("readyToUse"),
            bool(meta.get("deletionTimestamp")),
            status.get("host"),
            repr(status.get("disks")),
        )
        with lock:
            if obj is None or event_type == "DELETED":
                seen.pop(key, None)
                changed = True
            else:
                changed = seen.get(key) != mark
                seen[key] = mark
        if changed:
            controller.wake_all()

    return on_snapshot
