"""The daemon: both controllers, a health endpoint and a clean stop, in one process per host.

Threads, and why:

- The LibvirtMachine controller runs in every daemon, in a kopf operator of its own, on its own
  thread and event loop, watching only this host's machines.
- The generic VirtualMachine controller is cluster-wide work: exactly one daemon runs it at a time.
  A `coordination.k8s.io` Lease elects it (`generic.adapters.lease`); the winner starts a second
  kopf operator, on another thread, and stops it if it loses the Lease. Two operators, not one
  with two sets of handlers, because kopf cancels every task of its event loop when an operator
  stops, and because its finalizer and storage settings are per operator.
- The image cache (`image_cache.py`) has a thread of its own: it writes this host's entries into
  LibvirtImage status and deletes cached base images nothing uses, off the reconcile workers.
- A small HTTP server (`health.py`) answers `/healthz` (liveness), `/readyz` (readiness: libvirt
  answers too) and `/metrics` (Prometheus).

SIGTERM or SIGINT stops both operators, waits for in-flight reconciles, hands the Lease back,
closes the libvirt connection, stops libvirt's event loop thread and exits 0, within
`stop_deadline` seconds even when the API server and libvirtd are gone.
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
from typing import Any

import kopf
from kubernetes import client

from generic.adapters.kubeclient import load_kube_config
from generic.adapters.lease import LeaseElector
from generic.adapters.operator import configure_settings as configure_generic_settings
from generic.adapters.operator import register as register_generic
from generic.adapters.operator import register_login
from libvirt_provider.adapters.health import Check, HealthServer, bounded
from libvirt_provider.adapters.kube import KubeAdapter
from libvirt_provider.adapters.operator import MachineController
from libvirt_provider.adapters.operator import configure_settings as configure_provider_settings
from libvirt_provider.adapters.operator import register as register_provider
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor, stop_event_loop
from libvirt_provider.errors import ProviderError
from libvirt_provider.images.cache import ImageCache
from libvirt_provider.images.importer import ImageImporter
from libvirt_provider.machine.reconciler import MachineReconciler
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
    # Seconds a stop may take before the daemon leaves without the parts still blocked; under
    # the DaemonSet's 30 s termination grace period.
    stop_deadline: float = 25.0


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
            with asyncio.Runner() as runner:
                runner.get_loop().set_exception_handler(_quiet_watch_finalization)
                runner.run(
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

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def alive(self) -> bool:
        return self._thread.is_alive()


def _quiet_watch_finalization(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's exception handler, minus one known harmless report.

    An operator stopped while a watch stream is being (re)opened leaves kopf's `infinite_watch`
    generator suspended; the runner closes it at shutdown, and kopf's context manager inside it
    awaits once more, which asyncio reports with two tracebacks. Nothing is lost: the operator
    is stopping and the stream's connection is closed with the loop.
    """
    asyncgen = context.get("asyncgen")
    if (
        str(context.get("message", "")).startswith(
            "an error occurred during closing of asynchronous"
        )
        and getattr(asyncgen, "__qualname__", "") == "infinite_watch"
    ):
        log.debug("kopf's watch stream closed at shutdown: %s", context.get("exception"))
        return
    loop.default_exception_handler(context)


class _GenericLeader:
    """Runs the generic controller while this daemon holds the Lease: one kopf operator per
    term, and a term starts only after the previous one's operator has stopped."""

    def __init__(self, cfg: DaemonConfig, api: client.ApiClient) -> None:
        self._cfg = cfg
        self._api = api
        self._operator: _Operator | None = None
        self.identity = f"{cfg.host}-{os.getpid()}"
        self._elector = LeaseElector(
            api,
            name=LEASE_NAME,
            namespace=cfg.lease_namespace,
            identity=self.identity,
            on_start=self._lead,
            on_stop=self._follow,
        )

    def start(self) -> None:
        self._elector.start()

    def stop(self) -> None:
        """Stop the generic controller and hand the Lease back."""
        self._elector.stop()

    def problem(self) -> str | None:
        if not self._elector.alive():
            return "the leader election thread ended"
        operator = self._operator
        if self._elector.leading and operator is not None and not operator.alive():
            return "this daemon leads, but its generic controller stopped"
        return None

    def _lead(self) -> None:
        log.info("%s leads: starting the generic controller", self.identity)
        registry = kopf.OperatorRegistry()
        register_login(registry, kubeconfig=self._cfg.kubeconfig)
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
        log.info("%s no longer leads: stopping the generic controller", self.identity)
        if self._operator is not None:
            self._operator.stop()
            self._operator = None


Step = tuple[str, Callable[[], object]]


class _Shutdown:
    """The stop sequence, bounded in time: a daemon told to stop must be gone within its grace
    period even when the API server and libvirtd no longer answer.

    The first group of steps runs at once, side by side (each waits on its own work, so their
    timeouts must not add up); the second runs after it, in order (the libvirt connection is
    closed only once no worker uses it, and the event loop stopped after that).
    """

    def __init__(self, together: list[Step], then: list[Step], *, deadline: float) -> None:
        self._together = together
        self._then = then
        self._deadline = deadline
        self._pending: set[str] = set()
        self._lock = threading.Lock()

    def _run_step(self, name: str, step: Callable[[], object]) -> None:
        with self._lock:
            self._pending.add(name)
        try:
            step()
        except Exception:
            log.exception("stopping %s failed", name)
        finally:
            with self._lock:
                self._pending.discard(name)

    def run(self) -> bool:
        """True when every step finished within the deadline."""
        done = threading.Event()

        def sequence() -> None:
            threads = [
                threading.Thread(target=self._run_step, args=step, name=f"stop {step[0]}")
                for step in self._together
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            for step in self._then:
                self._run_step(*step)
            done.set()

        threading.Thread(target=sequence, name="shutdown", daemon=True).start()
        if done.wait(self._deadline):
            return True
        with self._lock:
            pending = ", ".join(sorted(self._pending)) or "the last steps"
        log.error(
            "stopping: %s did not finish within %.0f s; exiting without them",
            pending,
            self._deadline,
        )
        return False


def _machine_side(
    cfg: DaemonConfig, api: client.ApiClient, hypervisor: LibvirtHypervisor
) -> tuple[_Operator, ImageCache]:
    """The LibvirtMachine controller's operator and the host's image cache, wired together."""

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
    register_login(registry, kubeconfig=cfg.kubeconfig)
    register_provider(registry, controller=controller, host=cfg.host, images=cache)
    settings = kopf.OperatorSettings()
    configure_provider_settings(settings)
    return _Operator("provider-operator", registry, settings), cache


def _health(
    cfg: DaemonConfig,
    provider: _Operator,
    leader: _GenericLeader | None,
    hypervisor: LibvirtHypervisor,
) -> HealthServer:
    def libvirt_problem() -> str | None:
        try:
            hypervisor.host_facts()
        except ProviderError as err:
            return str(err)
        return None

    liveness: list[tuple[str, Check]] = [
        (
            "machine controller",
            lambda: None if provider.alive() else "the LibvirtMachine operator stopped",
        )
    ]
    if leader is not None:
        liveness.append(("generic controller", leader.problem))
    return HealthServer(
        address=cfg.health_address,
        port=cfg.health_port,
        liveness=liveness,
        readiness=[("libvirt", bounded(libvirt_problem, seconds=3, what="libvirtd"))],
    )


def run(cfg: DaemonConfig) -> int:
    api = load_kube_config(cfg.kubeconfig)
    hypervisor = LibvirtHypervisor(cfg.libvirt_uri)
    provider, cache = _machine_side(cfg, api, hypervisor)
    leader = _GenericLeader(cfg, api) if cfg.generic else None
    health = _health(cfg, provider, leader, hypervisor)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    health.start()
    provider.start()
    cache.start()
    if leader is not None:
        leader.start()
    log.info(
        "libvirt-provider on host %s: libvirt %s, health on %s:%d, generic controller %s",
        cfg.host,
        cfg.libvirt_uri,
        cfg.health_address,
        health.port,
        "by lease election" if leader else "disabled",
    )
    while not stop.wait(1.0):
        if not provider.alive():
            log.error("the LibvirtMachine operator stopped unexpectedly; exiting")
            break
    log.info("stopping")
    together: list[Step] = [
        ("the LibvirtMachine controller", provider.stop),
        ("the image cache", cache.stop),
        ("the health endpoint", health.stop),
    ]
    if leader is not None:
        together.append(("the generic controller", leader.stop))
    then: list[Step] = [
        ("the libvirt connection", hypervisor.close),
        ("libvirt's event loop", stop_event_loop),
    ]
    finished = _Shutdown(together, then, deadline=cfg.stop_deadline).run()
    log.info("stopped")
    code = 0 if stop.is_set() else 1
    if not finished:
        # A step is still blocked in a call that will not return (a hung socket); threads stuck
        # in C code must not meet the interpreter's finalization, so leave without it.
        logging.shutdown()
        os._exit(code)
    return code


def default_host() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname()
