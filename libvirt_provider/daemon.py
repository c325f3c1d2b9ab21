"""The daemon: both controllers, a health endpoint and a clean stop, in one process per host.

Threads, and why:

- The LibvirtMachine controller runs in every daemon, in a kopf operator of its own, on its own
  thread and event loop, watching only this host's machines.
- The generic VirtualMachine controller is cluster-wide work: exactly one daemon runs it at a time.
  A `coordination.k8s.io` Lease elects it (the Kubernetes client's elector); the winner starts a
  second kopf operator, on another thread, and stops it if it loses the Lease. Two operators, not
  one with two sets of handlers, because kopf cancels every task of its event loop when an operator
  stops, and because its finalizer and storage settings are per operator.
- The image cache (`image_cache.py`) has a thread of its own: it writes this host's entries into
  LibvirtImage status and deletes cached base images nothing uses, off the reconcile workers.
- A small HTTP server answers `/healthz` (200 while the controller's operator runs and libvirt
  answers) for the DaemonSet's liveness probe, and `/metrics` (Prometheus).

SIGTERM or SIGINT stops both operators, waits for in-flight reconciles, closes the libvirt
connection and exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kopf
import prometheus_client
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from generic.adapters.operator import configure_settings as configure_generic_settings
from generic.adapters.operator import register as register_generic
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor
from libvirt_provider.image_cache import ImageCache
from libvirt_provider.images import ImageImporter
from libvirt_provider.kube import KubeAdapter
from libvirt_provider.operator import MachineController
from libvirt_provider.operator import configure_settings as configure_provider_settings
from libvirt_provider.operator import register as register_provider
from libvirt_provider.reconciler import MachineReconciler
from libvirt_provider.resolved import BaseImage

__all__ = ["DaemonConfig", "run"]

log = logging.getLogger(__name__)

LEASE_NAME = "vm-api-generic-controller"


@dataclass(frozen=True)
class DaemonConfig:
    kubeconfig: str | None
    libvirt_uri: str
    host: str
    domain_types: frozenset[str] | None
    health_address: str
    health_port: int
    generic: bool
    lease_namespace: str
    workers: int
    # Namespace patterns the embedded generic controller serves; empty: the whole cluster.
    generic_namespaces: tuple[str, ...] = ()
    # Host directory where serial consoles are logged (None: no console logs).
    console_log_dir: str | None = None
    # Seconds between the image cache's periodic passes (status repair and collection).
    image_gc_interval: float = 300.0
    # False keeps every cached base image forever (status is still written).
    image_gc: bool = True


class _Operator:
    """A kopf operator on a thread of its own, stoppable from outside."""

    def __init__(
        self,
        name: str,
        registry: kopf.OperatorRegistry,
        settings: Any,
        *,
        namespaces: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self._registry = registry
        self._settings = settings
        self._namespaces = namespaces
        self._stop = threading.Event()
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            asyncio.run(
                kopf.operator(
                    registry=self._registry,
                    settings=self._settings,
                    standalone=True,
                    clusterwide=not self._namespaces,
                    namespaces=self._namespaces,
                    stop_flag=self._stop,
                    ready_flag=self.ready,
                )
            )
        except Exception:
            log.exception("operator %s ended with an error", self.name)
        finally:
            log.info("operator %s stopped", self.name)

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def alive(self) -> bool:
        return self._thread.is_alive()


def _login(registry: kopf.OperatorRegistry, prefix: str) -> None:
    @kopf.on.login(registry=registry, id=f"{prefix}/login")
    def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # An explicit kubeconfig is in $KUBECONFIG by now (see _load_kube_config); the client
        # library's loader reads that variable only once, at import, so kopf's own reader is used.
        if os.environ.get("KUBECONFIG"):
            return kopf.login_with_kubeconfig(**kwargs)
        return kopf.login_via_client(**kwargs)


def _load_kube_config(kubeconfig: str | None) -> client.ApiClient:
    if kubeconfig:
        # For kopf's login handler, which reads the kubeconfig on its own.
        os.environ["KUBECONFIG"] = kubeconfig
        config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    else:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


class _StoppableLeaseLock(LeaseLock):
    """The client's Lease lock, which stops creating and renewing once the daemon stops: its
    elector has no way to be stopped, and would otherwise take the released Lease back."""

    stopping: threading.Event

    def create(self, *args: Any, **kwargs: Any) -> bool:
        return False if self.stopping.is_set() else bool(super().create(*args, **kwargs))  # type: ignore[no-untyped-call]

    def update(self, *args: Any, **kwargs: Any) -> bool:
        return False if self.stopping.is_set() else bool(super().update(*args, **kwargs))  # type: ignore[no-untyped-call]


class _GenericLeader:
    """Runs the generic controller while this daemon holds the Lease."""

    def __init__(self, cfg: DaemonConfig, api: client.ApiClient) -> None:
        self._cfg = cfg
        self._api = api
        self._operator: _Operator | None = None
        self._stopping = threading.Event()
        self.identity = f"{cfg.host}-{os.getpid()}"

    def start(self) -> None:
        threading.Thread(target=self._elect, name="leader-election", daemon=True).start()

    def _elect(self) -> None:
        lock = _StoppableLeaseLock(  # type: ignore[no-untyped-call]
            LEASE_NAME, self._cfg.lease_namespace, self.identity
        )
        lock.stopping = self._stopping
        while not self._stopping.is_set():
            election = leaderelection.LeaderElection(  # type: ignore[no-untyped-call]
                electionconfig.Config(  # type: ignore[no-untyped-call]
                    lock,
                    # Renewing every 4 s keeps an idle daemon's API traffic low; a dead leader
                    # is replaced within the 15 s lease.
                    lease_duration=15,
                    renew_deadline=10,
                    retry_period=4,
                    onstarted_leading=self._lead,
                    onstopped_leading=self._follow,
                )
            )
            try:
                election.run()  # type: ignore[no-untyped-call]
            except Exception:
                log.exception("leader election failed; retrying")
            self._stopping.wait(2)

    def _lead(self) -> None:
        log.info("%s leads: starting the generic controller", self.identity)
        registry = kopf.OperatorRegistry()
        _login(registry, "vm-api-generic")
        register_generic(
            registry,
            api_client=self._api,
            workers=self._cfg.workers,
            namespaces=self._cfg.generic_namespaces,
        )
        settings = kopf.OperatorSettings()
        configure_generic_settings(settings)
        self._operator = _Operator(
            "generic-operator", registry, settings, namespaces=self._cfg.generic_namespaces
        )
        self._operator.start()

    def _follow(self) -> None:
        log.warning("%s lost the lease: stopping the generic controller", self.identity)
        self._stop_operator()

    def _stop_operator(self) -> None:
        if self._operator is not None:
            self._operator.stop()
            self._operator = None

    def stop(self) -> None:
        self._stopping.set()
        self._stop_operator()
        self._release()

    def _release(self) -> None:
        """Hand the Lease back, so another daemon takes over at its next try instead of waiting
        for the lease to run out. The elector renews no more once stopping is set."""
        leases = client.CoordinationV1Api(self._api)
        for _ in range(3):
            try:
                lease = leases.read_namespaced_lease(LEASE_NAME, self._cfg.lease_namespace)
                if lease.spec is None or lease.spec.holder_identity != self.identity:
                    return
                lease.spec.holder_identity = None
                # resourceVersion from the read: a renewal already in flight wins, and we look
                # again.
                leases.replace_namespaced_lease(LEASE_NAME, self._cfg.lease_namespace, lease)
                log.info("%s released the lease", self.identity)
                return
            except ApiException as err:
                if err.status != 409:
                    log.warning("could not release the lease: %s", err.reason)
                    return


def _health_server(cfg: DaemonConfig, healthy: Callable[[], bool]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                body = prometheus_client.generate_latest()
                self.send_response(200)
                self.send_header("Content-Type", prometheus_client.CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if self.path not in ("/healthz", "/readyz"):
                self.send_error(404)
                return
            ok = healthy()
            body = b"ok\n" if ok else b"unhealthy\n"
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("health: " + format, *args)

    server = ThreadingHTTPServer((cfg.health_address, cfg.health_port), Handler)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server


def run(cfg: DaemonConfig) -> int:
    api = _load_kube_config(cfg.kubeconfig)
    hypervisor = LibvirtHypervisor(cfg.libvirt_uri)

    def import_changed(base: BaseImage) -> None:
        # The image's status follows every change. Machines waiting for the image look again on
        # their own every few seconds while it runs; they are woken at once when it ends.
        if not images.running(base):
            controller.wake_all()
        cache.import_changed(base)

    images = ImageImporter(hypervisor, on_change=import_changed)
    store = KubeAdapter(api, host=cfg.host)
    cache = ImageCache(
        store=store,
        hypervisor=hypervisor,
        importer=images,
        host=cfg.host,
        interval=cfg.image_gc_interval,
        collect=cfg.image_gc,
    )
    reconciler = MachineReconciler(
        store=store,
        hypervisor=hypervisor,
        host=cfg.host,
        domain_types=cfg.domain_types,
        images=images,
        console_log_dir=cfg.console_log_dir,
    )
    controller = MachineController(reconciler, workers=cfg.workers)
    hypervisor.add_lifecycle_listener(controller.on_domain_event)
    hypervisor.add_reconnect_listener(controller.wake_all)

    registry = kopf.OperatorRegistry()
    _login(registry, "libvirt-machine")
    register_provider(registry, controller=controller, host=cfg.host, images=cache)
    settings = kopf.OperatorSettings()
    configure_provider_settings(settings)
    provider = _Operator("provider-operator", registry, settings)

    def healthy() -> bool:
        if not provider.alive():
            return False
        try:
            hypervisor.host_facts()
        except Exception:
            return False
        return True

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    health = _health_server(cfg, healthy)
    provider.start()
    cache.start()
    leader = _GenericLeader(cfg, api) if cfg.generic else None
    if leader is not None:
        leader.start()
    log.info(
        "libvirt-provider on host %s: libvirt %s, health on %s:%d, generic controller %s",
        cfg.host,
        cfg.libvirt_uri,
        cfg.health_address,
        health.server_port,
        "by lease election" if leader else "disabled",
    )
    while not stop.wait(1.0):
        if not provider.alive():
            log.error("the LibvirtMachine operator stopped unexpectedly; exiting")
            break
    log.info("stopping")
    if leader is not None:
        leader.stop()
    provider.stop()
    cache.stop()
    health.shutdown()
    hypervisor.close()
    return 0 if stop.is_set() else 1


def default_host() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname()
