"""Everything that serves one host, wired together: a `HostUnit`.

Why a unit: a local daemon serves one host (its own), a daemon in remote mode serves every remote
host it has claimed, and a host must be served the same way in both. A unit is the host's libvirt
connection, its LibvirtMachine controller (a kopf operator of its own, watching only this host's
machines), the snapshot controller for those machines (on the same operator), its image cache
and its host agent (LibvirtHost status, heartbeat). The catalog's
informers are shared by every unit of the process (`catalog_feed.CatalogFeed`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf
from kubernetes.client import ApiClient

from catalog.constants import WATCHED_KINDS
from generic.adapters.operator import register_login
from libvirt_provider import constants as c
from libvirt_provider.adapters.host.agent import HostAgent
from libvirt_provider.adapters.host.catalog_feed import CatalogFeed
from libvirt_provider.adapters.host.controller import MachineController, catalog_listener
from libvirt_provider.adapters.host.controller import (
    configure_settings as configure_provider_settings,
)
from libvirt_provider.adapters.host.controller import register as register_provider
from libvirt_provider.adapters.host.credentials import HostCredentials
from libvirt_provider.adapters.host.drain import DrainController
from libvirt_provider.adapters.host.migration_credentials import MigrationCredentials
from libvirt_provider.adapters.host.migrations import MigrationController, register_migrations
from libvirt_provider.adapters.host.restores import RestoreController, register_restores
from libvirt_provider.adapters.host.snapshots import SnapshotController, register_snapshots
from libvirt_provider.adapters.kube.adapter import KubeAdapter
from libvirt_provider.adapters.kube.drains import DrainApi
from libvirt_provider.adapters.kube.migrations import MigrationApi
from libvirt_provider.adapters.kube.restores import RestoreApi
from libvirt_provider.adapters.kube.snapshots import SnapshotApi
from libvirt_provider.adapters.runtime.kopf_thread import OperatorThread
from libvirt_provider.adapters.runtime.shutdown import Step
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor
from libvirt_provider.driver.limits import Limits
from libvirt_provider.errors import ProviderError
from libvirt_provider.host_api import LibvirtHostSpec
from libvirt_provider.hosts.heartbeat import heartbeat_interval
from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.images.cache import ImageCache
from libvirt_provider.images.importer import ImageImporter
from libvirt_provider.machine.reconciler import MachineReconciler
from libvirt_provider.migration.limits import MigrationLimits
from libvirt_provider.migration.reconciler import MigrationReconciler
from libvirt_provider.resolved import BaseImage
from libvirt_provider.snapshot.reconciler import SnapshotReconciler
from libvirt_provider.snapshot.restore import RestoreReconciler

__all__ = ["HostUnit", "UnitSettings"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UnitSettings:
    """What every unit of a daemon shares (from the command line)."""

    kubeconfig: str | None
    lease_namespace: str
    workers: int
    domain_types: frozenset[str] | None = None
    console_log_dir: str | None = None
    image_gc_interval: float = 300.0
    image_gc: bool = True
    image_handout_grace: float = 60.0
    preemption_grace: int = c.PREEMPTION_GRACE_SECONDS
    migration_uri: str | None = None
    migration_pkipath: str | None = None
    # With it, the pkipath folder's files come from this Secret in the lease namespace.
    migration_secret: str | None = None
    migration_limits: MigrationLimits = field(default_factory=MigrationLimits)
    # How long a heartbeat vouches for its host (the Lease's duration; --heartbeat-grace).
    heartbeat_grace: float = c.HEARTBEAT_GRACE_SECONDS
    # Where this daemon takes hops from the others ("ADDRESS:PORT", docs/console.md "Routing"),
    # published in its hosts' heartbeat Leases; None: it takes none.
    hop_address: str | None = None


class HostUnit:
    """One host's connection, machine controller, image cache and agent."""

    def __init__(
        self,
        api: ApiClient,
        *,
        host: str,
        hypervisor: LibvirtHypervisor,
        settings: UnitSettings,
        catalog: CatalogFeed,
        credentials: HostCredentials | None = None,
    ) -> None:
        self.host = host
        self.hypervisor = hypervisor
        self.credentials = credentials
        self.store = KubeAdapter(api, host=host)
        self._catalog = catalog
        remote = credentials is not None

        def import_changed(base: BaseImage) -> None:
            # The image's status follows every change. Machines waiting for the image look again
            # on their own every few seconds while it runs; they are woken at once when it ends.
            if not images.running(base):
                controller.wake_all()
            cache.import_changed(base)

        images = ImageImporter(hypervisor, on_change=import_changed)
        cache = ImageCache(
            store=self.store,
            hypervisor=hypervisor,
            importer=images,
            host=host,
            interval=settings.image_gc_interval,
            collect=settings.image_gc,
            grace=settings.image_handout_grace,
        )

        def allocations() -> tuple[Demand, int]:
            # Bound late: the reconciler, made below, asks the agent for the host's zone.
            return reconciler.allocations()

        def preemptible() -> tuple[Demand, int]:
            return reconciler.preemptible()

        def link() -> tuple[str, str]:
            state = hypervisor.connection_state()
            return state.reason, state.message

        def host_event(obj: dict[str, Any], reason: str, message: str, warning: bool) -> None:
            self.store.event(
                {**obj, "kind": c.HOST_KIND, "apiVersion": f"{c.GROUP}/{c.VERSION}"},
                reason=reason,
                message=message,
                warning=warning,
            )

        self.agent = HostAgent(
            api,
            hypervisor=hypervisor,
            host=host,
            lease_namespace=settings.lease_namespace,
            allocations=allocations,
            preemptible=preemptible,
            beat=not remote,
            create=not remote,
            link=link if remote else None,
            on_spec=self.apply_spec,
            events=host_event if remote else None,
            on_admission_change=lambda: controller.wake(reconciler.refused()),
            grace=settings.heartbeat_grace,
            interval=heartbeat_interval(settings.heartbeat_grace),
            hop_address=None if remote else settings.hop_address,
        )
        reconciler = MachineReconciler(
            store=self.store,
            hypervisor=hypervisor,
            host=host,
            domain_types=settings.domain_types,
            images=images,
            # Console logs are files on the machine running qemu; a remote host's are not ours.
            console_log_dir=None if remote else settings.console_log_dir,
            zone=self.agent.zone,
            on_allocations_change=self.agent.allocations_changed,
            host_view=self.agent.view,
            built=self.store.built_machines,
            on_capacity_freed=lambda: controller.wake(reconciler.refused()),
            preemption_grace=settings.preemption_grace,
        )
        self.controller = controller = MachineController(
            reconciler, workers=settings.workers, host=host
        )
        hypervisor.add_lifecycle_listener(controller.on_domain_event)
        hypervisor.add_reconnect_listener(controller.wake_all)
        self.cache = cache

        registry = kopf.OperatorRegistry()
        register_login(registry, kubeconfig=settings.kubeconfig)
        register_provider(
            registry, controller=controller, host=host, images=cache, store=self.store
        )
        # Snapshots of this host's machines (docs/snapshots.md), on the same operator.
        self.snapshots = SnapshotController(
            SnapshotReconciler(store=SnapshotApi(api, host=host), hypervisor=hypervisor, host=host)
        )
        register_snapshots(registry, controller=self.snapshots)
        hypervisor.add_reconnect_listener(self.snapshots.wake_all)
        # Restores in place of this host's machines to their snapshots (docs/snapshots.md).
        self.restores = RestoreController(
            RestoreReconciler(store=RestoreApi(api, host=host), hypervisor=hypervisor, host=host)
        )
        register_restores(registry, controller=self.restores)
        hypervisor.add_reconnect_listener(self.restores.wake_all)
        # This host's steps of live migrations (docs/migration.md), on the same operator: a
        # remote host's daemon runs elsewhere, so only a local host takes part.
        migration_credentials = None
        if not remote and settings.migration_secret and settings.migration_pkipath:
            migration_credentials = MigrationCredentials(
                api,
                host=host,
                namespace=settings.lease_namespace,
                secret=settings.migration_secret,
                folder=Path(settings.migration_pkipath),
            ).pkipath
        migration_reconciler = MigrationReconciler(
            store=MigrationApi(api, host=host, lease_namespace=settings.lease_namespace),
            hypervisor=hypervisor,
            host=host,
            prepare=reconciler.prepare_incoming,
            released=reconciler.release,
            migration_uri=None if remote else settings.migration_uri,
            pkipath=None if remote else settings.migration_pkipath,
            credentials=migration_credentials,
            zone=self.agent.zone,
            console_log_dir=None if remote else settings.console_log_dir,
            limits=settings.migration_limits,
            heartbeat_grace=settings.heartbeat_grace,
        )
        self.migrations = MigrationController(migration_reconciler)
        register_migrations(registry, controller=self.migrations)
        # The drain of this host (docs/migration.md, "Draining a host"): its own daemon runs it,
        # as it sends the host's migrations; a remote host's daemon sends none.
        self.drain: DrainController | None = None
        if not remote:
            self.drain = DrainController(
                store=DrainApi(api, host=host, lease_namespace=settings.lease_namespace),
                host=host,
                choose=migration_reconciler.choose_for,
                read_host=lambda: self.agent.informer.get(host),
            )
            self.agent.on_change = self.drain.wake
            self.migrations.on_change = self.drain.wake
        kopf_settings = kopf.OperatorSettings()
        configure_provider_settings(kopf_settings, host=host)
        self._listeners = {
            plural: catalog_listener(plural, controller=controller, images=cache)
            for plural in WATCHED_KINDS
        }
        self.store.use_informers(catalog.informers)
        self.operator = OperatorThread(f"provider-operator-{host}", registry, kopf_settings)

    def apply_spec(self, spec: LibvirtHostSpec, *, connect: bool = True) -> None:
        """The host's spec as it is now (the agent calls this every pass; the remote supervisor
        before the unit starts, with `connect` False: its thread also renews the host's claim,
        which must not wait on a host that does not answer): call limits, and a remote host's
        connection."""
        self.hypervisor.configure_limits(
            Limits(
                qps=spec.rate_limit.qps,
                burst=spec.rate_limit.burst,
                max_concurrent=spec.max_concurrent_operations,
            )
        )
        if self.credentials is not None and self.credentials.set_connection(spec.connection):
            # A new URI or Secret reference: connected with it at once, so the status written
            # next (this pass of the host agent) says how it went.
            if connect:
                self.hypervisor.reconnect()
            else:
                self.hypervisor.reset()
            self.controller.wake_all()

    def start(self) -> None:
        for plural, listener in self._listeners.items():
            self._catalog.add(plural, listener)
        try:
            self.store.list_built_machines()
        except ProviderError as err:
            # The first admission lists again (a reconcile that cannot is retried).
            log.warning("%s: listing the machines built here failed: %s", self.host, err)
        self.operator.start()
        self.agent.start()
        self.cache.start()
        if self.drain is not None:
            self.drain.start()

    def alive(self) -> bool:
        return self.operator.alive()

    def stop_steps(self) -> list[Step]:
        """What stopping the unit takes, to run together (the connection is closed after)."""

        def forget_catalog() -> None:
            for plural, listener in self._listeners.items():
                self._catalog.remove(plural, listener)

        steps: list[Step] = [
            (f"the LibvirtMachine controller of {self.host}", self.operator.stop),
            (f"the image cache of {self.host}", self.cache.stop),
            (f"the host agent of {self.host}", self.agent.stop),
            (f"the catalog listeners of {self.host}", forget_catalog),
        ]
        if self.drain is not None:
            steps.append((f"the drain of {self.host}", self.drain.stop))
        return steps

    def close(self) -> None:
        """After `stop_steps`: the connection, and a remote host's credential files."""
        self.hypervisor.close()
        if self.credentials is not None:
            self.credentials.remove()
