"""The generic controller and the placer, run by whichever daemon holds the
`vm-api-generic-controller` Lease.

Cluster-wide work runs in exactly one daemon at a time: `generic.adapters.lease` campaigns, and
each term starts a fresh kopf operator for the generic controller and stops it when the term
ends (kopf cancels every task of its loop when an operator stops, so an operator is not reused).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import kopf
from kubernetes import client

from generic import constants as vmapi
from generic.adapters.lease import LeaseElector
from generic.adapters.operator import configure_settings as configure_generic_settings
from generic.adapters.operator import register as register_generic
from generic.adapters.operator import register_login
from libvirt_provider import constants as c
from libvirt_provider.adapters.cluster.placer import Placer
from libvirt_provider.adapters.kube.adapter import KubeAdapter
from libvirt_provider.adapters.runtime.kopf_thread import OperatorThread

__all__ = ["LEASE_NAME", "GenericLeader", "LeaderSettings"]

log = logging.getLogger(__name__)

LEASE_NAME = "vm-api-generic-controller"


@dataclass(frozen=True)
class LeaderSettings:
    """What a term needs from the daemon's configuration."""

    # This daemon's name (its host, or a remote-mode replica's identity); the pid is appended.
    name: str
    lease_namespace: str
    kubeconfig: str | None
    workers: int
    # Namespace patterns the generic controller serves; empty: the whole cluster.
    generic_namespaces: tuple[str, ...] = ()
    # How long a host's heartbeat vouches for it (--heartbeat-grace).
    heartbeat_grace: float = c.HEARTBEAT_GRACE_SECONDS
    # How long a new VM's provider object may be missing before NotAdopted
    # (--missing-provider-grace).
    missing_provider_grace: float = vmapi.MISSING_PROVIDER_GRACE_SECONDS


class GenericLeader:
    """Runs the generic controller while this daemon holds the Lease: one kopf operator per
    term, and a term starts only after the previous one's operator has stopped."""

    def __init__(self, settings: LeaderSettings, api: client.ApiClient, store: KubeAdapter) -> None:
        self._settings = settings
        self._api = api
        self._store = store
        self._operator: OperatorThread | None = None
        self._placer: Placer | None = None
        self.identity = f"{settings.name}-{os.getpid()}"
        self._elector = LeaseElector(
            api,
            name=LEASE_NAME,
            namespace=settings.lease_namespace,
            identity=self.identity,
            on_start=self._lead,
            on_stop=self._follow,
        )

    def start(self) -> None:
        self._elector.start()

    def stop(self) -> bool:
        """Stop the generic controller and hand the Lease back; False when the term was still
        ending when the wait gave up (its operator or placer blocked on a frozen API server)."""
        return self._elector.stop()

    @property
    def leading(self) -> bool:
        """Whether this daemon holds the generic controller's Lease now."""
        return bool(self._elector.leading)

    def problem(self) -> str | None:
        if not self._elector.alive():
            return "the leader election thread ended"
        operator = self._operator
        if self._elector.leading and operator is not None and not operator.alive():
            return "this daemon leads, but its generic controller stopped"
        placer = self._placer
        if self._elector.leading and placer is not None and not placer.alive():
            return "this daemon leads, but its placer stopped"
        return None

    def _lead(self) -> None:
        log.info("%s leads: starting the generic controller", self.identity)
        registry = kopf.OperatorRegistry()
        register_login(registry, kubeconfig=self._settings.kubeconfig)
        register_generic(
            registry,
            api_client=self._api,
            workers=self._settings.workers,
            namespaces=self._settings.generic_namespaces,
            missing_provider_grace=self._settings.missing_provider_grace,
        )
        settings = kopf.OperatorSettings()
        configure_generic_settings(settings)
        # Cluster-wide in kopf, always: --generic-namespace patterns are applied by the
        # controller itself (see generic.adapters.operator).
        self._operator = OperatorThread("generic-operator", registry, settings)
        self._operator.start()
        self._placer = Placer(
            self._api,
            store=self._store,
            lease_namespace=self._settings.lease_namespace,
            heartbeat_grace=self._settings.heartbeat_grace,
        )
        self._placer.start()

    def _follow(self) -> None:
        log.info("%s no longer leads: stopping the generic controller", self.identity)
        # The operator first: its stop needs no API server, while the placer's waits for a pass
        # that may be stuck on one (up to its requests' retries).
        if self._operator is not None:
            self._operator.stop()
            self._operator = None
        if self._placer is not None:
            self._placer.stop()
            self._placer = None
