"""The generic controller's running parts in one process: work queue, workers, provider watches.

kopf (see `generic.adapters.operator`) only feeds it events; everything that talks to the API
server on the controller's behalf runs on its bounded worker threads and watch threads, never on
kopf's event loop.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from kubernetes import client

from generic import constants as c
from generic import metrics
from generic.adapters.copies import Copies
from generic.adapters.informer import GENERIC_KEPT, slim
from generic.adapters.kube import KubeGateway
from generic.adapters.kubeclient import load_kube_config
from generic.adapters.watches import ProviderWatchHub
from generic.lean import lean
from generic.reconciler import Reconciler
from generic.workqueue import WorkerPool, WorkQueue

__all__ = ["GenericController", "default_api_client", "namespace_filter", "vm_fingerprint"]

log = logging.getLogger(__name__)

VmKey = tuple[str, str]


def default_api_client() -> client.ApiClient:
    return load_kube_config(None)


def namespace_filter(patterns: Sequence[str]) -> Callable[[str], bool]:
    """A predicate for kopf-style namespace patterns (globs; `!pattern` excludes)."""
    if not patterns:
        return lambda _namespace: True
    include = [p for p in patterns if not p.startswith("!")]
    exclude = [p[1:] for p in patterns if p.startswith("!")]

    def in_scope(namespace: str) -> bool:
        if any(fnmatch.fnmatchcase(namespace, p) for p in exclude):
            return False
        return not include or any(fnmatch.fnmatchcase(namespace, p) for p in include)

    return in_scope


def _reconciler_view(vm: dict[str, Any]) -> dict[str, Any]:
    """What a pass reads of a VM: its metadata (with the labels and annotations it reads), status
    and `spec.infrastructureRef` (the rest of the spec is the provider's to read)."""
    spec = vm.get("spec")
    ref = spec.get("infrastructureRef") if isinstance(spec, dict) else None
    view = {**vm, "spec": {"infrastructureRef": ref} if ref is not None else {}}
    return slim(lean(view, GENERIC_KEPT))


def vm_fingerprint(meta: Mapping[str, Any]) -> Hashable:
    """What of a VM's metadata the reconcile depends on; spec changes move `generation`.

    A VM event whose fingerprint is unchanged only changed the status (or labels) and needs no
    reconcile; skipping it halves the work after each status write this controller makes.
    """
    return (
        meta.get("uid"),
        meta.get("generation"),
        meta.get("deletionTimestamp"),
        tuple(meta.get("finalizers") or ()),
    )


class GenericController:
    """The running parts: work queue, worker threads, provider watches and the reconciler.

    `start` and `stop` may be called repeatedly (an embedding process that runs the generic
    controller only while it holds a leader Lease): while stopped, VM and CRD events are only
    remembered; `start` replays the remembered CRDs and enqueues every known VM.

    While running it keeps a copy of every VM in scope from kopf's events (and the provider
    watches keep their objects), so passes read memory; a daemon that does not lead holds only
    the VMs' fingerprints.
    """

    def __init__(
        self,
        *,
        api_client: client.ApiClient | None,
        namespaces: Sequence[str],
        workers: int,
        poll_interval: float,
        missing_provider_grace: float = c.MISSING_PROVIDER_GRACE_SECONDS,
    ) -> None:
        self._api_client = api_client
        self._poll_interval = poll_interval
        self._missing_provider_grace = missing_provider_grace
        self.in_scope = namespace_filter(namespaces)
        self.queue: WorkQueue[VmKey] = WorkQueue()
        self._pool = WorkerPool(self.queue, self._process, workers=workers)
        self._workers = workers
        self._lock = threading.Lock()
        self._known_vms: dict[VmKey, Hashable] = {}
        self._vms = Copies(keep=_reconciler_view)
        self._crds: dict[str, dict[str, Any]] = {}
        self._hub: ProviderWatchHub | None = None
        self._reconciler: Reconciler | None = None

    @property
    def running(self) -> bool:
        return self._hub is not None

    def knows(self, namespace: str, name: str) -> bool:
        """Whether kopf has reported this VM (started or not)."""
        with self._lock:
            return (namespace, name) in self._known_vms

    def start(self) -> None:
        with self._lock:
            if self._hub is not None:
                return
            api = self._api_client or default_api_client()
            self._api_client = api
            # Copies are fed only while running: what a worker of the last term put after
            # `stop` cleared them would be older than anything seen since.
            self._vms.clear()
            hub = ProviderWatchHub(api, enqueue=self.queue.add, in_scope=self.in_scope)
            gateway = KubeGateway(api, vms=self._vms, provider_copies=hub.copies_of)
            hub.use_discovery(gateway.resolve_kind, gateway.invalidate_discovery)
            gateway.use_watch_status(hub.is_watched)
            self._reconciler = Reconciler(
                gateway,
                poll_interval=self._poll_interval,
                missing_provider_grace=self._missing_provider_grace,
            )
            self._hub = hub
            crds = list(self._crds.values())
            known = list(self._known_vms)
        for crd in crds:
            hub.on_crd(crd, deleted=False)
        metrics.QUEUE_DEPTH.set_function(lambda: len(self.queue))
        metrics.WATCHED_PROVIDER_KINDS.set_function(hub.watched_count)
        self._pool.start()
        for key in known:
            self.queue.add(key)
        log.info("generic controller started with %d workers", self._workers)

    def stop(self) -> None:
        with self._lock:
            hub, self._hub = self._hub, None
            self._vms.clear()
        if hub is not None:
            hub.stop()
        self._pool.stop()
        log.info("generic controller stopped")

    def shutdown(self) -> None:
        self.stop()
        self.queue.shutdown()

    def on_vm_event(self, body: dict[str, Any], *, deleted: bool, listed: bool = False) -> None:
        """A VM changed: reconcile it, unless only its status did (this controller wrote that).

        `listed`: the event comes from a fresh list (a watch that started over, as after an API
        server outage); an unchanged VM whose passes were failing is then retried at once
        instead of when its grown backoff ends."""
        meta = body.get("metadata") or {}
        namespace, name = meta.get("namespace"), meta.get("name")
        if not namespace or not name or not self.in_scope(namespace):
            return
        key = (namespace, name)
        fingerprint = vm_fingerprint(meta)
        with self._lock:
            if deleted:
                self._known_vms.pop(key, None)
                self._vms.drop(namespace, name)
                return
            unchanged = self._known_vms.get(key) == fingerprint
            self._known_vms[key] = fingerprint
            running = self._hub is not None
            if running:
                self._vms.put(body)
        if running and (not unchanged or (listed and self.queue.failures(key))):
            self.queue.add(key)

    def on_crd_event(self, body: Mapping[str, Any], *, deleted: bool) -> None:
        crd = dict(body)
        name = str((crd.get("metadata") or {}).get("name"))
        with self._lock:
            if deleted:
                self._crds.pop(name, None)
            else:
                self._crds[name] = crd
            hub = self._hub
        if hub is not None:
            hub.on_crd(crd, deleted=deleted)

    def _process(self, key: VmKey) -> None:
        reconciler = self._reconciler
        if reconciler is None:
            return
        with metrics.RECONCILE_SECONDS.time():
            outcome = reconciler.run(*key)
        if outcome.immediately:
            metrics.RECONCILES.labels("conflict").inc()
        elif outcome.retry:
            metrics.RECONCILES.labels("retry").inc()
        elif outcome.requeue_after is not None:
            metrics.RECONCILES.labels("requeue").inc()
        else:
            metrics.RECONCILES.labels("done").inc()
        self.queue.settle(key, outcome)
