"""Remote mode: serve every LibvirtHost that has `spec.connection`, each from one replica at a time.

Why Leases: a remote host runs no daemon of its own, so some replica of the remote-mode
Deployment must serve it, and never two at once (two controllers building one machine). Each
remote host's heartbeat Lease (`libvirt-host-<host>`, the one placement reads) is also its claim:
a replica campaigns for it with Kubernetes' leader-election rule, serves the host (a `HostUnit`)
for as long as it renews, and stops serving when it cannot renew within half the heartbeat
grace, before the Lease runs out (the grace, `--heartbeat-grace`) and another replica may take
it. A replica that dies is replaced within the grace plus one retry period.

The supervisor also notices credential rotation: every pass it compares the host's Secret's
resourceVersion with the one the connection was made with, and reconnects when it changed.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client
from pydantic import ValidationError

from generic.adapters.informer import ClusterInformer
from generic.adapters.lease import LeaseElector
from generic.background import BackgroundLoop
from libvirt_provider import constants as c
from libvirt_provider.adapters.host.agent import heartbeat_lease_name
from libvirt_provider.adapters.host.catalog_feed import CatalogFeed
from libvirt_provider.adapters.host.credentials import HostCredentials
from libvirt_provider.adapters.host.unit import HostUnit, UnitSettings
from libvirt_provider.adapters.runtime.shutdown import Shutdown, Step
from libvirt_provider.driver.endpoint import ConnectionProblemError
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor
from libvirt_provider.host_api import LibvirtHostSpec
from libvirt_provider.hosts.heartbeat import heartbeat_interval

__all__ = ["RemoteHosts", "takeover_seconds"]

log = logging.getLogger(__name__)


def takeover_seconds(grace: float = c.HEARTBEAT_GRACE_SECONDS) -> float:
    """At most this long after a holder dies, another replica serves the host."""
    return grace + c.HEARTBEAT_SECONDS


# How long stopping one host's unit may take.
UNIT_STOP_SECONDS = 20.0


@dataclass
class _Claim:
    elector: LeaseElector
    unit: HostUnit | None = None
    secret_version: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class RemoteHosts:
    """Campaigns for every remote LibvirtHost and serves those it holds."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        identity: str,
        settings: UnitSettings,
        catalog: CatalogFeed,
        credentials_root: Path,
        interval: float = c.HEARTBEAT_SECONDS,
    ) -> None:
        self._api = api
        self._identity = identity
        self._settings = settings
        self._catalog = catalog
        self._root = credentials_root
        self._interval = min(interval, heartbeat_interval(settings.heartbeat_grace))
        self._claims: dict[str, _Claim] = {}
        self._lock = threading.Lock()
        self.hosts = ClusterInformer(
            api,
            group=c.GROUP,
            version=c.VERSION,
            plural=c.HOST_PLURAL,
            on_change=lambda _type, _obj: self._loop.wake(),
        )
        self._loop = BackgroundLoop("remote-hosts", self._run)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.hosts.start()
        self._loop.start()

    def alive(self) -> bool:
        return self._loop.alive()

    def problem(self) -> str | None:
        """For the liveness probe: a served host whose controller died."""
        for name, unit in self.units():
            if not unit.alive():
                return f"the LibvirtMachine operator of host {name} stopped"
        return None

    def units(self) -> list[tuple[str, HostUnit]]:
        with self._lock:
            return [(n, cl.unit) for n, cl in self._claims.items() if cl.unit is not None]

    def hypervisors(self) -> list[tuple[str, LibvirtHypervisor]]:
        return [(name, unit.hypervisor) for name, unit in self.units()]

    def stop(self) -> None:
        """Stop serving every host and hand each claim back, so another replica takes over
        at its next try rather than after the Lease runs out."""
        self._loop.stop(self._interval + 5)
        with self._lock:
            claims = list(self._claims.values())
            self._claims.clear()
        stoppers = [
            threading.Thread(target=claim.elector.stop, args=(UNIT_STOP_SECONDS,), daemon=True)
            for claim in claims
        ]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join(UNIT_STOP_SECONDS + 2)
        self.hosts.stop()

    # -- the supervisor's passes -------------------------------------------------------------

    def _run(self, loop: BackgroundLoop) -> None:
        while not loop.stopping and not self.hosts.wait_synced(1.0):
            pass
        while not loop.stopping:
            try:
                self._pass()
            except Exception:  # a bug must not end remote hosts for good
                log.exception("remote hosts: pass failed")
            loop.wait(self._interval)

    def _pass(self) -> None:
        wanted: dict[str, LibvirtHostSpec] = {}
        for obj in self.hosts.items() or []:
            name = str((obj.get("metadata") or {}).get("name"))
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                continue
            try:
                spec = LibvirtHostSpec.model_validate(obj.get("spec") or {})
            except ValidationError:
                continue
            if spec.connection is not None:
                wanted[name] = spec
        with self._lock:
            gone = [n for n in self._claims if n not in wanted]
            new = [n for n in wanted if n not in self._claims]
            for name in new:
                self._claims[name] = self._claim(name)
            leaving = [self._claims.pop(n) for n in gone]
            claims = dict(self._claims)
        for claim in leaving:
            claim.elector.stop(UNIT_STOP_SECONDS)
        for name in new:
            claims[name].elector.start()
        for name, claim in claims.items():
            with claim.lock:
                unit = claim.unit
                if unit is None or unit.credentials is None:
                    continue
                try:
                    version = unit.credentials.secret_version()
                except ConnectionProblemError:
                    continue  # the API server did not answer: nothing is known of the Secret
                if version != claim.secret_version:
                    if claim.secret_version is not None or version is not None:
                        log.info("host %s: the credentials Secret changed; reconnecting", name)
                    claim.secret_version = version
                    unit.hypervisor.reset()
                    unit.controller.wake_all()

    def _claim(self, host: str) -> _Claim:
        claim: _Claim

        def serve() -> None:
            self._serve(host, claim)

        def release() -> None:
            self._release(host, claim)

        claim = _Claim(
            elector=LeaseElector(
                self._api,
                name=heartbeat_lease_name(host),
                namespace=self._settings.lease_namespace,
                identity=self._identity,
                on_start=serve,
                on_stop=release,
                lease_seconds=max(1, round(self._settings.heartbeat_grace)),
                # Stops serving before the Lease runs out and another replica may take the host.
                renew_deadline=self._settings.heartbeat_grace / 2,
                retry_period=self._interval,
                labels={c.HOST_LABEL: host},
                # Where other daemons' console hops reach this replica (docs/console.md,
                # "Routing"); None removes what a former holder published.
                annotations={c.HOP_ADDRESS_ANNOTATION: self._settings.hop_address},
                thread_name=f"claim-{host}",
            )
        )
        return claim

    def _serve(self, host: str, claim: _Claim) -> None:
        obj = self.hosts.get(host) or {}
        try:
            spec = LibvirtHostSpec.model_validate(obj.get("spec") or {})
        except ValidationError:
            spec = LibvirtHostSpec()
        credentials = HostCredentials(
            self._api, host=host, namespace=self._settings.lease_namespace, root=self._root
        )
        hypervisor = LibvirtHypervisor(credentials.uri, host=host)
        unit = HostUnit(
            self._api,
            host=host,
            hypervisor=hypervisor,
            settings=self._settings,
            catalog=self._catalog,
            credentials=credentials,
        )
        unit.apply_spec(spec, connect=False)
        try:
            version = credentials.secret_version()
        except ConnectionProblemError:
            version = None
        with claim.lock:
            claim.unit = unit
            claim.secret_version = version
        unit.start()
        log.info("%s serves remote host %s", self._identity, host)

    def _release(self, host: str, claim: _Claim) -> None:
        with claim.lock:
            unit, claim.unit = claim.unit, None
        if unit is None:
            return
        steps: list[Step] = [("the connection", unit.close)]
        Shutdown(unit.stop_steps(), steps, deadline=UNIT_STOP_SECONDS).run()
        log.info("%s no longer serves remote host %s", self._identity, host)
