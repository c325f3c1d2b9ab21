"""Client-side limits on one host's libvirt calls: a burst of machines never exceeds them.

Ten machines (each several calls) against a burst of 5 and 2 calls at once: enough to meet both
limits. Cost: about 30 s warm, the machines built over ssh at 10 calls a second.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from libvirt_provider import constants as c
from tests.support.daemons import RemoteDaemon, metric, metrics, start_remote_daemon
from tests.support.factories import remote_pair
from tests.support.hosts import (
    delete_secret,
    forget_host,
    put_secret,
    set_host,
    ssh_data,
    wait_connected,
)
from tests.support.kube import GROUP, V, create, namespace
from tests.support.lab_access import LabInfo, LabRemote
from tests.support.waiting import eventually

SECRET = "e2e-remote-limits"
MACHINES = 10
LIMITS = {"rateLimit": {"qps": 10, "burst": 5}, "maxConcurrentOperations": 2}


@pytest.fixture
def daemon(lab: LabInfo, remote_api: client.ApiClient, remote: LabRemote) -> Iterator[RemoteDaemon]:
    put_secret(remote_api, SECRET, ssh_data(remote))
    set_host(remote_api, remote, {"uri": remote.ssh_uri, "secretRef": {"name": SECRET}}, **LIMITS)
    started = start_remote_daemon(lab, remote, "e2e-remote-limits")
    try:
        yield started
    finally:
        started.stop()
        forget_host(remote_api, remote)
        delete_secret(remote_api, SECRET)


def built(api: client.ApiClient, ns: str) -> int:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, V, ns, "libvirtmachines"
    )["items"]
    return sum(
        1
        for obj in items
        for cond in (obj.get("status") or {}).get("conditions") or []
        if cond.get("type") == "InfrastructureReady" and cond.get("status") == "True"
    )


def test_a_burst_of_machines_stays_within_the_hosts_limits(
    remote_api: client.ApiClient, remote: LabRemote, daemon: RemoteDaemon
) -> None:
    wait_connected(remote_api, remote, c.REASON_CONNECTED)
    eventually(
        lambda: (
            metric(
                metrics(daemon, remote),
                "vmapi_libvirt_call_limit",
                host=remote.name,
                limit="max_concurrent",
            )
            == 2
        ),
        timeout=30,
        what="the host's limits applied",
    )
    with namespace(remote_api) as ns:
        for i in range(MACHINES):
            create(remote_api, remote_pair(ns, f"burst-{i}", remote, powerState="PoweredOff"))
        eventually(
            lambda: built(remote_api, ns) == MACHINES,
            timeout=300,
            interval=1,
            what=f"{MACHINES} machines built on the remote host",
        )
        figures = metrics(daemon, remote)
        calls = metric(figures, "vmapi_libvirt_calls_total", host=remote.name)
        peak = metric(figures, "vmapi_libvirt_calls_in_flight_peak", host=remote.name)
        per_second = metric(figures, "vmapi_libvirt_calls_peak_per_second", host=remote.name)
        # Enough calls that the limits were tested (several per machine), none above them.
        assert calls > MACHINES * 3, calls
        assert 1 <= peak <= 2, peak
        assert per_second <= 5 + 10, per_second
        assert metric(figures, "vmapi_libvirt_connected", host=remote.name) == 1
