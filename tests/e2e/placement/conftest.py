"""Placement on the lab's several libvirt hosts: one daemon process per host, as a DaemonSet runs.

Every lab host is a libvirtd of its own, in its own network namespace, with its own network and
pool (and one with a network only it has, one with an extra pool), so what placement decides is
checked against real libvirt facts: a machine is looked for on every host's libvirtd.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libvirt
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from tests.e2e.conftest import LabHost, LabInfo
from tests.e2e.provider.conftest import (
    GROUP,
    V,
    condition,
    create,
    get,
    health_base,
    install_api,
    namespace,
    pair,
    start_daemon,
)
from tests.support.waiting import eventually

HOSTS_PLURAL = "libvirthosts"
LEASE_NAMESPACE = "kube-system"


@dataclass
class Daemon:
    host: LabHost
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class Fleet:
    """The module's daemons, one per lab host; tests may stop and start them."""

    lab: LabInfo
    api: client.ApiClient
    daemons: dict[str, Daemon] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.lab.hosts]

    def start(self, host: LabHost, *, crash_point: str | None = None) -> Daemon:
        proc, log = start_daemon(
            self.lab,
            host=host.name,
            libvirt_uri=host.uri,
            log_name=f"e2e-placement-{host.name}{'-crash' if crash_point else ''}.log",
            lease_namespace=LEASE_NAMESPACE,
            crash_point=crash_point,
        )
        health_base(proc, log)
        daemon = Daemon(host, proc, log)
        self.daemons[host.name] = daemon
        return daemon

    def start_together(self, hosts: list[LabHost]) -> None:
        """A daemon per host, all started at once (as a DaemonSet's pods start), then waited
        for."""
        started = [
            (
                host,
                *start_daemon(
                    self.lab,
                    host=host.name,
                    libvirt_uri=host.uri,
                    log_name=f"e2e-placement-{host.name}.log",
                    lease_namespace=LEASE_NAMESPACE,
                ),
            )
            for host in hosts
        ]
        for host, proc, log in started:
            health_base(proc, log)
            self.daemons[host.name] = Daemon(host, proc, log)

    def stop(self, name: str, *, kill: bool = False) -> None:
        daemon = self.daemons.pop(name)
        if kill:
            daemon.proc.kill()
            daemon.proc.wait(30)
            return
        daemon.proc.terminate()
        try:
            assert daemon.proc.wait(timeout=60) == 0, f"daemon {name} did not stop cleanly"
        finally:
            if daemon.proc.poll() is None:
                daemon.proc.kill()

    def leader(self) -> str:
        """The host whose daemon holds the generic controller's Lease."""
        lease = client.CoordinationV1Api(self.api).read_namespaced_lease(
            "vm-api-generic-controller", LEASE_NAMESPACE
        )
        holder = str(lease.spec.holder_identity or "")
        found = [n for n in self.daemons if holder.startswith(f"{n}-")]
        assert found, f"no running daemon holds the Lease (holder {holder!r})"
        return found[0]

    def wait_hosts_ready(self, names: list[str] | None = None) -> None:
        for name in names or self.names:
            eventually(
                lambda name=name: host_ready(self.api, name),
                timeout=90,
                what=f"LibvirtHost {name} Ready with its inventory",
            )

    def stop_all(self) -> None:
        for name in list(self.daemons):
            self.stop(name)


def host_object(api: client.ApiClient, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = client.CustomObjectsApi(api).get_cluster_custom_object(
            GROUP, V, HOSTS_PLURAL, name
        )
        return found
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def host_ready(api: client.ApiClient, name: str) -> bool:
    obj = host_object(api, name) or {}
    status = obj.get("status") or {}
    ready = [x for x in status.get("conditions") or [] if x.get("type") == "Ready"]
    return bool(ready and ready[0].get("status") == "True" and status.get("allocatable"))


def patch_host(api: client.ApiClient, name: str, body: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_cluster_custom_object(GROUP, V, HOSTS_PLURAL, name, body)


def reset_host(api: client.ApiClient, name: str) -> None:
    """Back to defaults: schedulable, default overcommit, nothing reserved, no zone label."""
    obj = host_object(api, name)
    if obj is None:
        return
    labels = {k: None for k in (obj["metadata"].get("labels") or {})}
    defaults = {
        "unschedulable": False,
        "overcommit": {"cpu": 4.0, "memory": 1.0},
        "reserved": {"cpus": 0, "memory": "0"},
    }
    patch_host(api, name, {"metadata": {"labels": labels or None}, "spec": defaults})


@pytest.fixture(scope="module")
def fleet(lab: LabInfo, api_client: client.ApiClient) -> Iterator[Fleet]:
    assert len(lab.hosts) >= 3, "the placement tests need the lab's three libvirt hosts"
    install_api(lab, api_client)
    custom = client.CustomObjectsApi(api_client)
    # Hosts other test modules' daemons left behind (their heartbeats are stale) would only add
    # "not ready" to every message here; they come back when their daemons run again.
    for obj in custom.list_cluster_custom_object(GROUP, V, HOSTS_PLURAL)["items"]:
        if obj["metadata"]["name"] not in {h.name for h in lab.hosts}:
            custom.delete_cluster_custom_object(GROUP, V, HOSTS_PLURAL, obj["metadata"]["name"])
    fleet = Fleet(lab, api_client)
    try:
        for host in lab.hosts:
            reset_host(api_client, host.name)
            fleet.start(host)
        fleet.wait_hosts_ready()
        eventually(fleet.leader, timeout=60, what="one of the daemons leading")
        yield fleet
    finally:
        fleet.stop_all()


@pytest.fixture
def ns(fleet: Fleet, api_client: client.ApiClient) -> Iterator[str]:
    try:
        with namespace(api_client) as name:
            yield name
    finally:
        for host in fleet.lab.hosts:
            reset_host(api_client, host.name)


def unplaced(
    ns: str,
    name: str,
    *,
    vm_spec: dict[str, Any] | None = None,
    lm_spec: dict[str, Any] | None = None,
    running: bool = False,
) -> list[dict[str, Any]]:
    """A linked pair with no host: placement chooses one. Powered off unless `running` (a
    placed machine is still built: volumes and a defined domain, without a guest to run)."""
    spec = {"powerState": "PoweredOn" if running else "PoweredOff", **(vm_spec or {})}
    vm, lm = pair(ns, name, vm_spec=spec)
    lm["metadata"].get("labels", {}).pop(c.HOST_LABEL, None)
    lm["spec"].update(lm_spec or {})
    return [vm, lm]


def placed_on(api: client.ApiClient, ns: str, name: str, *, timeout: float = 60) -> str:
    found: str = eventually(
        lambda: ((get(api, ns, name, vm=False) or {}).get("spec") or {}).get("host"),
        timeout=timeout,
        what=f"{ns}/{name} placed",
    )
    return found


def wait_reason(
    api: client.ApiClient,
    ns: str,
    name: str,
    reason: str,
    *,
    vm: bool = False,
    timeout: float = 60,
    what: str,
) -> dict[str, Any]:
    """The InfrastructureReady condition of the LibvirtMachine (or with `vm`, the VM) once its
    reason is `reason`."""
    found: dict[str, Any] = eventually(
        lambda: (
            (cond := condition(get(api, ns, name, vm=vm), "InfrastructureReady")).get("reason")
            == reason
            and cond
        ),
        timeout=timeout,
        what=what,
    )
    return found


def create_all(api: client.ApiClient, docs: list[list[dict[str, Any]]]) -> None:
    for pair_docs in docs:
        create(api, pair_docs)


@contextlib.contextmanager
def connections(lab: LabInfo) -> Iterator[dict[str, libvirt.virConnect]]:
    conns = {h.name: libvirt.open(h.uri) for h in lab.hosts}
    try:
        yield conns
    finally:
        for conn in conns.values():
            conn.close()


def hosts_defining(conns: dict[str, libvirt.virConnect], domain: str) -> list[str]:
    """The lab hosts whose libvirtd has `domain` defined."""
    return sorted(
        name for name, conn in conns.items() if domain in {d.name() for d in conn.listAllDomains(0)}
    )


__all__ = [
    "Fleet",
    "connections",
    "create_all",
    "host_object",
    "hosts_defining",
    "patch_host",
    "placed_on",
    "unplaced",
    "wait_reason",
]
