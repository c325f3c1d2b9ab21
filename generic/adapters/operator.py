"""The embedding entry point: `register()` puts the generic controller on a kopf registry.

This is what the daemon calls next to its own LibvirtMachine handlers, and what any other
provider's kopf process can call: one operator process, one registry, several controllers. It
registers only event handlers (which kopf neither retries nor persists state for) plus startup
and cleanup hooks, so it never uses kopf's finalizer or its progress annotations: the VM's
finalizer `vm-api.io/virtualmachine` is managed explicitly by the reconciler. The embedding
process still owns kopf's operator-wide settings; `configure_settings` gives them this project's
names and the watch timeouts that re-establish dead streams.

What the embedding process must do:
- pass the same namespace patterns to `register(namespaces=...)` and to `kopf.operator(...)`
  (or neither, for cluster-wide);
- give kopf's finalizer and progress/diff-base annotations its own prefix (`configure_settings`
  does so; do not keep kopf's defaults, which other operators share);
- let kopf log in (kopf's standard login handlers) and pass a `kubernetes` ApiClient, or let
  `register` build one from the in-cluster config or KUBECONFIG at startup;
- RBAC: see docs/generic-controller.md.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import kopf
from kubernetes import client, config

from generic import constants as c
from generic.adapters.kube import KubeGateway
from generic.adapters.watches import ProviderWatchHub
from generic.reconciler import Reconciler
from generic.workqueue import WorkerPool, WorkQueue

__all__ = [
    "GenericController",
    "api_client_for",
    "configure_settings",
    "register",
    "register_login",
    "run_standalone",
]

log = logging.getLogger(__name__)

VmKey = tuple[str, str]


def configure_settings(settings: kopf.OperatorSettings, *, prefix: str = c.KOPF_PREFIX) -> None:
    """kopf settings for a process that runs the generic controller (alone or embedded)."""
    settings.persistence.finalizer = f"{prefix}/kopf-finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=prefix)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=prefix, key="last-handled-configuration"
    )
    # The API server ends each watch after server_timeout; the client gives up on a stream that
    # has been silent longer than inactivity/client timeouts, so a dead connection is replaced.
    settings.watching.server_timeout = 240
    settings.watching.client_timeout = 270
    settings.watching.connect_timeout = 10
    settings.posting.level = logging.WARNING


def _default_api_client() -> client.ApiClient:
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


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
    """

    def __init__(
        self,
        *,
        api_client: client.ApiClient | None,
        namespaces: Sequence[str],
        workers: int,
        poll_interval: float,
    ) -> None:
        self._api_client = api_client
        self._poll_interval = poll_interval
        self.in_scope = namespace_filter(namespaces)
        self.queue: WorkQueue[VmKey] = WorkQueue()
        self._pool = WorkerPool(self.queue, self._process, workers=workers)
        self._workers = workers
        self._lock = threading.Lock()
        self._known_vms: dict[VmKey, Hashable] = {}
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
            api = self._api_client or _default_api_client()
            self._api_client = api
            gateway = KubeGateway(api)
            hub = ProviderWatchHub(
                api,
                enqueue=self.queue.add,
                in_scope=self.in_scope,
                resolve=gateway.resolve_kind,
                invalidate=gateway.invalidate_discovery,
            )
            gateway.use_watch_status(hub.is_watched)
            self._reconciler = Reconciler(gateway, poll_interval=self._poll_interval)
            self._hub = hub
            crds = list(self._crds.values())
            known = list(self._known_vms)
        for crd in crds:
            hub.on_crd(crd, deleted=False)
        self._pool.start()
        for key in known:
            self.queue.add(key)
        log.info("generic controller started with %d workers", self._workers)

    def stop(self) -> None:
        with self._lock:
            hub, self._hub = self._hub, None
        if hub is not None:
            hub.stop()
        self._pool.stop()
        log.info("generic controller stopped")

    def shutdown(self) -> None:
        self.stop()
        self.queue.shutdown()

    def on_vm_event(self, meta: Mapping[str, Any], *, deleted: bool) -> None:
        """A VM changed: reconcile it, unless only its status did (this controller wrote that)."""
        namespace, name = meta.get("namespace"), meta.get("name")
        if not namespace or not name or not self.in_scope(namespace):
            return
        key = (namespace, name)
        fingerprint = vm_fingerprint(meta)
        with self._lock:
            if deleted:
                self._known_vms.pop(key, None)
                return
            unchanged = self._known_vms.get(key) == fingerprint
            self._known_vms[key] = fingerprint
            running = self._hub is not None
        if running and not unchanged:
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
        outcome = reconciler.run(*key)
        if outcome.immediately:
            self.queue.add(key)
            return
        if outcome.retry:
            self.queue.add_rate_limited(key)
            return
        self.queue.forget(key)
        if outcome.requeue_after is not None:
            self.queue.add_after(key, outcome.requeue_after)


def register(
    registry: kopf.OperatorRegistry,
    *,
    api_client: client.ApiClient | None = None,
    namespaces: Sequence[str] = (),
    workers: int = 4,
    poll_interval: float = 30.0,
    autostart: bool = True,
) -> GenericController:
    """Register the generic VirtualMachine controller on `registry`; returns its handle.

    `workers` bounds the threads that call the Kubernetes API; `poll_interval` is how often an
    adopted VM whose provider kind is not watched (unlabelled CRD) is re-checked. With
    `autostart=False` the controller only remembers what it sees until the embedding process
    calls `start()` (for example on winning a leader Lease) and `stop()` (on losing it).
    """
    controller = GenericController(
        api_client=api_client,
        namespaces=namespaces,
        workers=workers,
        poll_interval=poll_interval,
    )

    if autostart:

        @kopf.on.startup(registry=registry, id="vm-api-generic/startup")
        def _start(**_: Any) -> None:
            controller.start()

    @kopf.on.cleanup(registry=registry, id="vm-api-generic/cleanup")
    def _stop(**_: Any) -> None:
        controller.shutdown()

    @kopf.on.event(c.GROUP, c.VERSION, c.PLURAL, registry=registry, id="vm-api-generic/vm")
    async def _vm_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        controller.on_vm_event(body.get("metadata", {}), deleted=event.get("type") == "DELETED")

    @kopf.on.event(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        registry=registry,
        id="vm-api-generic/provider-crds",
    )
    def _crd_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        controller.on_crd_event(body, deleted=event.get("type") == "DELETED")

    return controller


def register_login(registry: kopf.OperatorRegistry, *, kubeconfig: str | None) -> None:
    """kopf's login from `kubeconfig` if given, else from the in-cluster service account."""

    @kopf.on.login(registry=registry, id="vm-api-generic/login")
    def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if kubeconfig:
            # kopf's kubeconfig reader looks at KUBECONFIG when called, unlike the client
            # library, which reads it once at import.
            os.environ["KUBECONFIG"] = kubeconfig
            return kopf.login_with_kubeconfig(**kwargs)
        return kopf.login_via_client(**kwargs)


def api_client_for(kubeconfig: str | None) -> client.ApiClient:
    """A Kubernetes client for `kubeconfig`, or in-cluster/default config when None."""
    if not kubeconfig:
        return _default_api_client()
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=kubeconfig
    )
    return api


def run_standalone(
    *, kubeconfig: str | None, namespaces: Sequence[str], workers: int, poll_interval: float
) -> None:
    """Run a kopf operator that hosts only the generic controller (blocks until signalled)."""
    registry = kopf.OperatorRegistry()
    register_login(registry, kubeconfig=kubeconfig)
    register(
        registry,
        api_client=api_client_for(kubeconfig),
        namespaces=namespaces,
        workers=workers,
        poll_interval=poll_interval,
    )
    settings = kopf.OperatorSettings()
    configure_settings(settings)
    kopf.run(
        registry=registry,
        settings=settings,
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces,
    )
