"""The daemon: both controllers, a health endpoint and a clean stop, in one process per host.

Threads, and why:

- The LibvirtMachine controller runs in every daemon, in a kopf operator of its own, on its own
  thread and event loop, watching only this host's machines.
- The generic VirtualMachine controller is cluster-wide work: exactly one daemon runs it at a time
  (`leader.py`): the Lease winner starts a second kopf operator (`kopf_thread.py`) and stops it
  when its term ends. Two operators, not one with two sets of handlers, because kopf cancels every
  task of its event loop when an operator stops, and because its finalizer and storage settings
  are per operator.
- The host agent (`host_agent.py`) keeps this host's LibvirtHost and heartbeat Lease, on its own
  thread; the leader also runs the placer (`placer.py`), which binds machines without a host.
- The image cache (`images/cache.py`) has a thread of its own: it writes this host's entries into
  LibvirtImage status and deletes cached base images nothing uses, off the reconcile workers.
- A small HTTP server (`health.py`) answers `/healthz` (liveness), `/readyz` (readiness: libvirt
  answers too) and `/metrics` (Prometheus).

SIGTERM or SIGINT (`shutdown.py`) stops both operators, waits for in-flight reconciles, hands the
Lease back, closes the libvirt connection, stops libvirt's event loop thread and exits 0, within
`stop_deadline` seconds even when the API server and libvirtd are gone.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import select
import signal
import socket
from dataclasses import dataclass

import kopf
from kubernetes.client import ApiClient

from catalog.constants import CATALOG_PLURALS, GROUP, VERSION
from generic.adapters.informer import ClusterInformer
from generic.adapters.kubeclient import load_kube_config
from generic.adapters.operator import register_login
from libvirt_provider.adapters.health import Check, HealthServer, bounded
from libvirt_provider.adapters.host_agent import HostAgent
from libvirt_provider.adapters.kopf_thread import OperatorThread
from libvirt_provider.adapters.kube import KubeAdapter
from libvirt_provider.adapters.leader import GenericLeader
from libvirt_provider.adapters.operator import MachineController, catalog_listener
from libvirt_provider.adapters.operator import configure_settings as configure_provider_settings
from libvirt_provider.adapters.operator import register as register_provider
from libvirt_provider.adapters.shutdown import Shutdown, Step
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor, stop_event_loop
from libvirt_provider.errors import ProviderError
from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.images.cache import ImageCache
from libvirt_provider.images.importer import ImageImporter
from libvirt_provider.machine.reconciler import MachineReconciler
from libvirt_provider.resolved import BaseImage

__all__ = ["DaemonConfig", "run"]

log = logging.getLogger(__name__)


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
    # Where /metrics is served apart from the probes; None: beside them on the health port.
    metrics_address: str | None = None
    metrics_port: int = 9441
    # Seconds a stop may take before the daemon leaves without the parts still blocked; under
    # the DaemonSet's 30 s termination grace period.
    stop_deadline: float = 25.0


def _machine_side(
    cfg: DaemonConfig, api: ApiClient, store: KubeAdapter, hypervisor: LibvirtHypervisor
) -> tuple[OperatorThread, ImageCache, list[ClusterInformer], HostAgent]:
    """The LibvirtMachine controller's operator, the host's image cache, the catalog's
    informers and the host's agent (its LibvirtHost and heartbeat), wired together."""

    def import_changed(base: BaseImage) -> None:
        # The image's status follows every change. Machines waiting for the image look again on
        # their own every few seconds while it runs; they are woken at once when it ends.
        if not images.running(base):
            controller.wake_all()
        cache.import_changed(base)

    images = ImageImporter(hypervisor, on_change=import_changed)
    cache = ImageCache(
        store=store,
        hypervisor=hypervisor,
        importer=images,
        host=cfg.host,
        interval=cfg.image_gc_interval,
        collect=cfg.image_gc,
    )

    def allocations() -> tuple[Demand, int]:
        # Bound late: the reconciler, made below, asks the agent for the host's zone.
        return reconciler.allocations()

    agent = HostAgent(
        api,
        hypervisor=hypervisor,
        host=cfg.host,
        lease_namespace=cfg.lease_namespace,
        allocations=allocations,
    )
    reconciler = MachineReconciler(
        store=store,
        hypervisor=hypervisor,
        host=cfg.host,
        domain_types=cfg.domain_types,
        images=images,
        console_log_dir=cfg.console_log_dir,
        zone=agent.zone,
        on_allocations_change=agent.allocations_changed,
    )
    controller = MachineController(reconciler, workers=cfg.workers)
    hypervisor.add_lifecycle_listener(controller.on_domain_event)
    hypervisor.add_reconnect_listener(controller.wake_all)

    registry = kopf.OperatorRegistry()
    register_login(registry, kubeconfig=cfg.kubeconfig)
    register_provider(registry, controller=controller, host=cfg.host, images=cache)
    settings = kopf.OperatorSettings()
    configure_provider_settings(settings, host=cfg.host)
    # Every pass reads the whole catalog: served from memory, fed by one watch per kind, whose
    # changes also wake the machines (so the wake-up and the read come from the same copy).
    catalog = [
        ClusterInformer(
            api,
            group=GROUP,
            version=VERSION,
            plural=plural,
            on_change=catalog_listener(plural, controller=controller, images=cache),
        )
        for plural in CATALOG_PLURALS
    ]
    store.use_informers({informer.plural: informer for informer in catalog})
    return OperatorThread("provider-operator", registry, settings), cache, catalog, agent


def _health(
    cfg: DaemonConfig,
    provider: OperatorThread,
    leader: GenericLeader | None,
    hypervisor: LibvirtHypervisor,
    store: KubeAdapter,
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
        metrics=cfg.metrics_address is None,
        liveness=liveness,
        readiness=[
            ("libvirt", bounded(libvirt_problem, seconds=3, what="libvirtd")),
            ("kubernetes", bounded(store.access_problem, seconds=7, what="the API server")),
        ],
    )


# Seconds after the stop deadline at which a watchdog prints every thread's stack and ends the
# process (exit status 1), however it is stuck. Under the DaemonSet the kubelet's SIGKILL (30 s
# grace) may come first; the watchdog is for every other way the daemon is run.
STOP_WATCHDOG_MARGIN = 10.0


def run(cfg: DaemonConfig) -> int:
    # First of all: a stop asked for while the daemon is still being put together is a clean
    # stop too, not a death by the signal's default action.
    stop = StopSignals()
    # `kill -USR1 <pid>` prints every thread's stack to stderr: how to see where a daemon hangs.
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    api = load_kube_config(cfg.kubeconfig)
    hypervisor = LibvirtHypervisor(cfg.libvirt_uri)
    store = KubeAdapter(api, host=cfg.host)
    provider, cache, catalog, agent = _machine_side(cfg, api, store, hypervisor)
    leader = GenericLeader(cfg, api, store) if cfg.generic else None
    health = _health(cfg, provider, leader, hypervisor, store)

    metrics = (
        HealthServer(address=cfg.metrics_address, port=cfg.metrics_port, checks=False, metrics=True)
        if cfg.metrics_address is not None
        else None
    )
    for informer in catalog:
        informer.start()
    health.start()
    if metrics is not None:
        metrics.start()
    provider.start()
    agent.start()
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
    # The last resort behind the deadline below: whatever still runs after it (interpreter
    # finalization waits for non-daemon threads, such as kopf's handler executor) gets its
    # stacks printed and the process ends, so a stop is always bounded and a hang explained.
    faulthandler.dump_traceback_later(cfg.stop_deadline + STOP_WATCHDOG_MARGIN, exit=True)
    together: list[Step] = [
        ("the LibvirtMachine controller", provider.stop),
        ("the image cache", cache.stop),
        ("the host agent", agent.stop),
        ("the health endpoint", health.stop),
        *((f"the {i.plural} informer", i.stop) for i in catalog),
        *([("the metrics endpoint", metrics.stop)] if metrics is not None else []),
    ]
    if leader is not None:
        together.append(("the generic controller", leader.stop))
    then: list[Step] = [
        ("the libvirt connection", hypervisor.close),
        ("libvirt's event loop", stop_event_loop),
    ]
    finished = Shutdown(together, then, deadline=cfg.stop_deadline).run()
    log.info("stopped")
    code = 0 if stop.received else 1
    if not finished:
        # A step is still blocked in a call that will not return (a hung socket); threads stuck
        # in C code must not meet the interpreter's finalization, so leave without it.
        logging.shutdown()
        os._exit(code)
    return code


class StopSignals:
    """SIGTERM and SIGINT, recorded by a handler that takes no lock.

    A Python signal handler runs on the main thread between any two bytecodes: inside
    `threading.Event.wait`'s own lock, or inside the handler of a signal that came a moment
    earlier (`make run` sends SIGINT to the process group and SIGTERM from its runner at once).
    A handler calling `Event.set()` then takes a non-reentrant lock its own thread holds, and the
    daemon never stops. This one only appends to a list; the wait wakes through the wakeup fd.
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        self._wake_r, wake_w = socket.socketpair()
        wake_w.setblocking(False)
        self._wake_w = wake_w  # kept open for the process's life, as the wakeup fd
        signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._record)

    def _record(self, signum: int, _frame: object) -> None:
        self.received.append(signum)

    def wait(self, timeout: float) -> bool:
        """True once a stop signal came; otherwise after at most `timeout` seconds."""
        if not self.received:
            readable, _, _ = select.select([self._wake_r], [], [], timeout)
            if readable:
                self._wake_r.recv(512)
        return bool(self.received)


def default_host() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname()
