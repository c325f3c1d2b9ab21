"""The daemon: both controllers, a health endpoint and a clean stop, in one process per host.

Both run modes (a local host's daemon, and remote mode's replicas) share one start and stop
sequence (`run`); a `Mode` says what differs: which hosts are served, and how readiness is judged.

Threads, and why:

- The LibvirtMachine controller runs in every daemon, in a kopf operator of its own, on its own
  thread and event loop, watching only this host's machines.
- The generic VirtualMachine controller is cluster-wide work: exactly one daemon runs it at a time
  (`cluster.leader`): the Lease winner starts a second kopf operator (`runtime.kopf_thread`) and
  stops it when its term ends. Two operators, not one with two sets of handlers, because kopf
  cancels every task of its event loop when an operator stops, and because its finalizer and
  storage settings are per operator.
- The host agent (`host.agent`) keeps this host's LibvirtHost and heartbeat Lease, on its own
  thread; the leader also runs the placer (`cluster.placer`), which binds machines without a host.
- The image cache (`images/cache.py`) has a thread of its own: it writes this host's entries into
  LibvirtImage status and deletes cached base images nothing uses, off the reconcile workers.
- With `--console-port`, the console subresources and `kubectl vm top`'s statistics
  (`process.console_server`, docs/console.md): an accept thread, a thread per connection, a loop
  re-reading the front-proxy trust.
- A small HTTP server (`process.health`) answers `/healthz` (liveness) and `/readyz`
  (readiness: libvirt answers too, judged by a loop of its own every few seconds), and a second
  one `/metrics` (Prometheus) on loopback, unless both are asked for on one address.

SIGTERM or SIGINT (`process.signals`, `runtime.shutdown`) stops both operators, waits for
in-flight reconciles, hands the Lease back, closes the libvirt connection, stops libvirt's event
loop thread and exits 0, within `stop_deadline` seconds even when the API server and libvirtd are
gone.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes.client import ApiClient

from generic import constants as vmapi
from generic.adapters.kubeclient import load_kube_config
from generic.adapters.operator import lean_watch_events
from libvirt_provider import constants as c
from libvirt_provider.adapters.cluster.leader import GenericLeader, LeaderSettings
from libvirt_provider.adapters.host.catalog_feed import CatalogFeed
from libvirt_provider.adapters.host.credentials import default_root, make_root, remove_root
from libvirt_provider.adapters.host.remote import RemoteHosts
from libvirt_provider.adapters.host.unit import HostUnit, UnitSettings
from libvirt_provider.adapters.kube.adapter import KEPT, LEAN_KINDS, KubeAdapter
from libvirt_provider.adapters.process.call_metrics import register_call_metrics
from libvirt_provider.adapters.process.console_keeper import KeptHost
from libvirt_provider.adapters.process.console_server import (
    ConsoleServer,
    HopSettings,
    settings_from_files,
)
from libvirt_provider.adapters.process.console_share import SharingSettings
from libvirt_provider.adapters.process.endpoint_rules import readiness_max_age
from libvirt_provider.adapters.process.guest_dial import GuestDialer, netns_path
from libvirt_provider.adapters.process.health import (
    READINESS_INTERVAL,
    Check,
    HealthServer,
    bounded,
)
from libvirt_provider.adapters.process.heap import Heap
from libvirt_provider.adapters.process.host_metrics import register_host_metrics
from libvirt_provider.adapters.process.machine_metrics import (
    HostSource,
    register_machine_metrics,
)
from libvirt_provider.adapters.process.signals import StopSignals
from libvirt_provider.adapters.runtime.shutdown import Shutdown, Step
from libvirt_provider.console.hop import format_hop_address
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor, stop_event_loop
from libvirt_provider.errors import ProviderError
from libvirt_provider.migration.limits import MigrationLimits

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
    console_log_bytes: int = c.CONSOLE_LOG_BYTES
    # The console subresources' TLS port (None: not served), address and serving certificate.
    console_port: int | None = None
    console_address: str = "0.0.0.0"
    console_cert_file: str = ""
    console_key_file: str = ""
    # The hop between daemons (docs/console.md, "Routing"): the port other daemons' hops come in
    # on (None: no hops, either way), the CA their certificates must verify against, and the
    # address published for them in this daemon's hosts' heartbeat Leases.
    console_hop_port: int | None = None
    console_hop_ca_file: str = ""
    console_advertise_address: str = ""
    # Shared console sessions: bytes replayed on attach, idle timeouts (0: none).
    console_replay_bytes: int = c.CONSOLE_REPLAY_BYTES
    console_idle_timeout: float = c.CONSOLE_WRITER_IDLE_SECONDS
    console_viewer_idle_timeout: float = c.CONSOLE_VIEWER_IDLE_SECONDS
    # The network namespace (name or path) in which port-forward dials guests (None: the daemon's
    # own, right on a KVM host; docs/console.md "Port-forward and ssh").
    guest_netns: str | None = None
    # Seconds between the image cache's periodic passes (status repair and collection).
    image_gc_interval: float = 300.0
    # False keeps every cached base image forever (status is still written).
    image_gc: bool = True
    # Seconds a base handed to a new machine is safe from collection (before its overlay exists).
    image_handout_grace: float = 60.0
    # Seconds a preempted spot machine's guest has to shut down before it is powered off.
    preemption_grace: int = c.PREEMPTION_GRACE_SECONDS
    # This host's libvirtd as other hosts reach it to migrate here (None: takes no migrations),
    # and the TLS client credentials its libvirtd opens a target's with (docs/migration.md).
    migration_uri: str | None = None
    migration_pkipath: str | None = None
    # A Secret in the lease namespace the daemon writes the pkipath folder's files from (None:
    # the operator places them).
    migration_secret: str | None = None
    # The migrations' limits and ends: outbound per host and per cluster at once, seconds without
    # progress, seconds per GiB of memory and disk (docs/migration.md, "MigrationLimits and ends").
    migration_limits: MigrationLimits = field(default_factory=MigrationLimits)
    # Remote mode: serve the LibvirtHosts that have spec.connection (claimed one by one through
    # their heartbeat Leases) instead of this machine's own libvirtd.
    remote: bool = False
    # This replica's name in the remote hosts' Leases (remote mode).
    identity: str = ""
    # Where remote hosts' credentials are written (a tmpfs); None: `credentials.default_root()`.
    credentials_dir: str | None = None
    # Where /metrics is served: loopback unless asked otherwise (docs/security.md says why); on
    # `metrics_port`, or beside the probes when this is the health address too.
    metrics_address: str = "127.0.0.1"
    metrics_port: int = 9441
    # Seconds a stop may take before the daemon leaves without the parts still blocked; under
    # the DaemonSet's 30 s termination grace period.
    stop_deadline: float = 25.0
    # How long a host's heartbeat vouches for it: the heartbeat Lease's duration, and the grace
    # the leader's placer judges every host by (give every daemon the same).
    heartbeat_grace: float = c.HEARTBEAT_GRACE_SECONDS
    # How long the embedded generic controller lets a new VM's provider object be missing before
    # the VM reports NotAdopted.
    missing_provider_grace: float = vmapi.MISSING_PROVIDER_GRACE_SECONDS
    # Seconds between two runs of the readiness checks while they pass (the readiness probe's
    # period; every second while they fail).
    readiness_interval: float = READINESS_INTERVAL


@dataclass(frozen=True)
class Mode:
    """What one run mode serves. Everything else in a daemon's life (the catalog feed, probes,
    metrics, the leader's campaign, the stop sequence) is the same in both modes (`_serve`)."""

    # This daemon's name: its host, or a remote-mode replica's identity.
    name: str
    store: KubeAdapter
    start: Callable[[], None]
    # A part whose death ends the daemon (the orchestrator restarts it).
    failed: Callable[[], str | None]
    liveness: list[tuple[str, Check]]
    readiness: list[tuple[str, Check]]
    # The hosts whose libvirt calls /metrics counts.
    hosts: Callable[[], list[tuple[str, LibvirtHypervisor]]]
    # The hosts whose machines and state /metrics reports (`_host_source`).
    metrics_sources: Callable[[], list[HostSource]]
    # Stop steps run beside the common ones, then in order after them.
    together: list[Step]
    then: list[Step]
    description: str
    # The hosts whose machines' console logs this daemon keeps itself (remote hosts: qemu's
    # files are on them); None: qemu's own files, or none.
    kept_consoles: Callable[[], list[KeptHost]] | None = None


def _local_mode(cfg: DaemonConfig, api: ApiClient, catalog: CatalogFeed) -> Mode:
    """A local daemon serves its own host's libvirtd; it is ready when both libvirtd and the
    API server answer."""
    hypervisor = LibvirtHypervisor(cfg.libvirt_uri, host=cfg.host)
    unit = HostUnit(
        api, host=cfg.host, hypervisor=hypervisor, settings=unit_settings(cfg), catalog=catalog
    )
    provider = unit.operator

    def libvirt_problem() -> str | None:
        try:
            hypervisor.host_facts()
        except ProviderError as err:
            return str(err)
        return None

    def machine_controller() -> str | None:
        return None if provider.alive() else "the LibvirtMachine operator stopped"

    return Mode(
        name=cfg.host,
        store=unit.store,
        start=unit.start,
        failed=machine_controller,
        liveness=[("machine controller", machine_controller)],
        readiness=[
            ("libvirt", bounded(libvirt_problem, seconds=3, what="libvirtd")),
            ("kubernetes", bounded(unit.store.access_problem, seconds=7, what="the API server")),
            ("heartbeat", unit.agent.lease_problem),
        ],
        hosts=lambda: [(cfg.host, hypervisor)],
        metrics_sources=lambda: [_host_source(unit)],
        together=unit.stop_steps(),
        then=[("the libvirt connection", hypervisor.close)],
        description=f"on host {cfg.host}: libvirt {cfg.libvirt_uri}",
    )


def _remote_mode(cfg: DaemonConfig, api: ApiClient, catalog: CatalogFeed) -> Mode:
    """Remote mode: no libvirtd of its own; every remote LibvirtHost this replica claims is
    served by a unit of its own (`host.remote`). Ready when the API server answers."""
    identity = cfg.identity or f"{socket.gethostname()}-{os.getpid()}"
    if cfg.console_log_dir is not None and cfg.console_port is None:
        log.info(
            "--console-log-dir keeps remote hosts' console logs for kubectl vm console --logs, "
            "which needs --console-port: none are kept"
        )
    root = make_root(Path(cfg.credentials_dir) if cfg.credentials_dir else default_root())
    store = KubeAdapter(api, host=identity)
    remote = RemoteHosts(
        api,
        identity=identity,
        settings=unit_settings(cfg),
        catalog=catalog,
        credentials_root=root,
    )

    def supervisor() -> str | None:
        return None if remote.alive() else "the remote-host supervisor stopped"

    return Mode(
        name=identity,
        store=store,
        start=remote.start,
        failed=supervisor,
        liveness=[("remote hosts", supervisor), ("remote host controllers", remote.problem)],
        readiness=[("kubernetes", bounded(store.access_problem, seconds=7, what="the API server"))],
        hosts=remote.hypervisors,
        metrics_sources=lambda: [_host_source(unit) for _name, unit in remote.units()],
        together=[("the remote hosts", remote.stop)],
        then=[("the credential files", lambda: remove_root(root))],
        description=f"in remote mode as {identity}: serving LibvirtHosts with spec.connection",
        # A host handed back leaves this list, and its machines' kept logs go with it.
        kept_consoles=lambda: [
            KeptHost(name, unit.hypervisor, unit.store.kept_consoles)
            for name, unit in remote.units()
        ],
    )


def _host_source(unit: HostUnit) -> HostSource:
    """What /metrics reads of one served host: all of it held in memory but the bulk call."""
    return HostSource(
        host=unit.host,
        hypervisor=unit.hypervisor,
        machines=unit.store.machine_identities,
        machine_states=unit.store.machine_states,
        machine_readiness=unit.store.machine_readiness,
        host_object=lambda: unit.agent.informer.get(unit.host),
    )


# Seconds after the stop deadline at which a watchdog prints every thread's stack and ends the
# process (exit status 1), however it is stuck. Under the DaemonSet the kubelet's SIGKILL (30 s
# grace) may come first; the watchdog is for every other way the daemon is run.
STOP_WATCHDOG_MARGIN = 10.0
# malloc arenas for the whole process, and how often freed heap memory is handed back (see
# `process.heap`); a trim walks the free lists only, which is cheap next to a pass.
MALLOC_ARENAS = 2
# Blocks from this size on are mapped and unmapped on their own, never kept in the heap.
MMAP_THRESHOLD_BYTES = 256 * 1024
HEAP_TRIM_SECONDS = 30.0


def run(cfg: DaemonConfig) -> int:
    # First of all: a stop asked for while the daemon is still being put together is a clean
    # stop too, not a death by the signal's default action.
    stop = StopSignals()
    # `kill -USR1 <pid>` prints every thread's stack to stderr: how to see where a daemon hangs.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # Before any thread exists: threads created later share these arenas.
    heap = Heap()
    heap.limit_arenas(MALLOC_ARENAS)
    heap.fix_mmap_threshold(MMAP_THRESHOLD_BYTES)
    # Before the operators start: kopf's watches of VMs and LibvirtMachines decode them lean.
    lean_watch_events(LEAN_KINDS, KEPT)

    api = load_kube_config(cfg.kubeconfig)
    catalog = CatalogFeed(api)
    mode = _remote_mode(cfg, api, catalog) if cfg.remote else _local_mode(cfg, api, catalog)
    register_call_metrics(mode.hosts)
    machine_stats = register_machine_metrics(mode.metrics_sources)
    leader = (
        GenericLeader(leader_settings(cfg, mode.name), api, mode.store) if cfg.generic else None
    )
    register_host_metrics(
        mode.metrics_sources, leading=lambda: leader.leading if leader is not None else None
    )
    console = (
        ConsoleServer(
            settings_from_files(
                cfg.console_address,
                cfg.console_port,
                cfg.console_cert_file,
                cfg.console_key_file,
                hop=HopSettings(
                    port=cfg.console_hop_port,
                    ca_file=cfg.console_hop_ca_file,
                    lease_namespace=cfg.lease_namespace,
                )
                if cfg.console_hop_port is not None
                else None,
            ),
            api,
            mode.hosts,
            stats_sources=mode.metrics_sources,
            stats=machine_stats,
            sharing=_console_sharing(cfg),
            dialer=GuestDialer(netns_path(cfg.guest_netns) if cfg.guest_netns else None),
            kept_hosts=mode.kept_consoles,
        )
        if cfg.console_port is not None
        else None
    )
    liveness = list(mode.liveness)
    if leader is not None:
        liveness.append(("generic controller", leader.problem))
    readiness = list(mode.readiness)
    if console is not None:
        # Readiness only: a console endpoint that cannot serve must take this daemon out of the
        # APIService's Service, not restart a daemon whose machines are fine.
        readiness.append(("console subresources", console.problem))
    health = HealthServer(
        address=cfg.health_address,
        port=cfg.health_port,
        metrics=_metrics_beside_probes(cfg),
        liveness=liveness,
        readiness=readiness,
        readiness_interval=cfg.readiness_interval,
        readiness_max_age=readiness_max_age(cfg.readiness_interval),
    )
    metrics = _metrics_server(cfg)

    catalog.start()
    health.start()
    if metrics is not None:
        metrics.start()
    mode.start()
    if leader is not None:
        leader.start()
    if console is not None:
        console.start()
        log.info("console subresources on %s:%d", cfg.console_address, console.port)
    log.info(
        "libvirt-provider %s, health on %s:%d, metrics on %s:%d, generic controller %s",
        mode.description,
        cfg.health_address,
        health.port,
        cfg.metrics_address,
        health.port if metrics is None else metrics.port,
        "by lease election" if leader else "disabled",
    )
    together: list[Step] = [*mode.together, *catalog.stop_steps()]
    together.append(("the health endpoint", health.stop))
    if metrics is not None:
        together.append(("the metrics endpoint", metrics.stop))
    if leader is not None:
        together.append(("the generic controller", leader.stop))
    if console is not None:
        together.append(("the console subresources", console.stop))
    return _serve_until_stopped(cfg, stop, failed=mode.failed, together=together, then=mode.then)


def _metrics_beside_probes(cfg: DaemonConfig) -> bool:
    """One listener serves both when both are asked for on the same address (a daemon whose
    probes are on loopback already, as in the lab; or metrics exposed on purpose)."""
    return cfg.metrics_address == cfg.health_address


def _metrics_server(cfg: DaemonConfig) -> HealthServer | None:
    """/metrics on an address of its own (by default loopback, while the probes listen on the
    pod's address for the kubelet)."""
    if _metrics_beside_probes(cfg):
        return None
    return HealthServer(
        address=cfg.metrics_address,
        port=cfg.metrics_port,
        checks=False,
        metrics=True,
        name="metrics",
    )


def _serve_until_stopped(
    cfg: DaemonConfig,
    stop: StopSignals,
    *,
    failed: Callable[[], str | None],
    together: list[Step],
    then: list[Step],
) -> int:
    """Wait for a stop signal (or for `failed` to name a part that died), then stop: `together`
    side by side, then `then` in order, then libvirt's event loop; within the deadline. Meanwhile
    freed heap memory is handed back every `HEAP_TRIM_SECONDS`."""
    heap = Heap()
    since_trim = 0.0
    while not stop.wait(1.0):
        problem = failed()
        if problem is not None:
            log.error("%s unexpectedly; exiting", problem)
            break
        since_trim += 1.0
        if since_trim >= HEAP_TRIM_SECONDS:
            since_trim = 0.0
            heap.trim()
    log.info("stopping")
    # The last resort behind the deadline below: whatever still runs after it (interpreter
    # finalization waits for non-daemon threads, such as kopf's handler executor) gets its
    # stacks printed and the process ends, so a stop is always bounded and a hang explained.
    faulthandler.dump_traceback_later(cfg.stop_deadline + STOP_WATCHDOG_MARGIN, exit=True)
    steps = [*then, ("libvirt's event loop", stop_event_loop)]
    finished = Shutdown(together, steps, deadline=cfg.stop_deadline).run()
    log.info("stopped")
    code = 0 if stop.received else 1
    if not finished:
        # A step is still blocked in a call that will not return (a hung socket); threads stuck
        # in C code must not meet the interpreter's finalization, so leave without it.
        logging.shutdown()
        os._exit(code)
    return code


def leader_settings(cfg: DaemonConfig, name: str) -> LeaderSettings:
    return LeaderSettings(
        name=name,
        lease_namespace=cfg.lease_namespace,
        kubeconfig=cfg.kubeconfig,
        workers=cfg.workers,
        generic_namespaces=cfg.generic_namespaces,
        heartbeat_grace=cfg.heartbeat_grace,
        missing_provider_grace=cfg.missing_provider_grace,
    )


def unit_settings(cfg: DaemonConfig) -> UnitSettings:
    return UnitSettings(
        kubeconfig=cfg.kubeconfig,
        lease_namespace=cfg.lease_namespace,
        workers=cfg.workers,
        domain_types=cfg.domain_types,
        console_log_dir=cfg.console_log_dir,
        image_gc_interval=cfg.image_gc_interval,
        image_gc=cfg.image_gc,
        image_handout_grace=cfg.image_handout_grace,
        preemption_grace=cfg.preemption_grace,
        migration_uri=cfg.migration_uri,
        migration_pkipath=cfg.migration_pkipath,
        migration_secret=cfg.migration_secret,
        migration_limits=cfg.migration_limits,
        heartbeat_grace=cfg.heartbeat_grace,
        hop_address=_hop_address(cfg),
    )


def _hop_address(cfg: DaemonConfig) -> str | None:
    if cfg.console_port is None or cfg.console_hop_port is None:
        return None
    return format_hop_address(cfg.console_advertise_address, cfg.console_hop_port)


def default_host() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname()


def _console_sharing(cfg: DaemonConfig) -> SharingSettings:
    return SharingSettings(
        replay_bytes=cfg.console_replay_bytes,
        writer_idle_seconds=cfg.console_idle_timeout,
        viewer_idle_seconds=cfg.console_viewer_idle_timeout,
        # Remote mode: the folder this replica keeps its remote hosts' logs in (qemu's files
        # are on those hosts, out of its reach).
        log_dir=cfg.console_log_dir,
        log_bytes=cfg.console_log_bytes,
        log_rotated=c.CONSOLE_LOG_ROTATED if cfg.remote else 0,
    )
