"""Placement on the lab's several libvirt hosts: one daemon process per host, as a DaemonSet runs.

Every lab host is a libvirtd of its own, in its own network namespace, with its own network and
pool (and one with a network only it has, one with an extra pool), so what placement decides is
checked against real libvirt facts: a machine is looked for on every host's libvirtd. The fleet
of daemons and the host helpers are in tests/support (`daemons.Fleet`, `hosts`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.support.daemons import Fleet
from tests.support.hosts import HOSTS_PLURAL, reset_host
from tests.support.kube import GROUP, V, install_api, namespace
from tests.support.lab_access import LabInfo
from tests.support.waiting import eventually


@pytest.fixture(scope="module")
def fleet(
    lab: LabInfo, api_client: client.ApiClient, request: pytest.FixtureRequest
) -> Iterator[Fleet]:
    """The lab hosts' daemons, with the flags the module's `DAEMON_ARGS` names, if any."""
    assert len(lab.hosts) >= 3, "the placement tests need the lab's three libvirt hosts"
    install_api(lab, api_client)
    custom = client.CustomObjectsApi(api_client)
    # Hosts other test modules' daemons left behind (their heartbeats are stale) would only add
    # "not ready" to every message here; they come back when their daemons run again.
    for obj in custom.list_cluster_custom_object(GROUP, V, HOSTS_PLURAL)["items"]:
        if obj["metadata"]["name"] not in {h.name for h in lab.hosts}:
            custom.delete_cluster_custom_object(GROUP, V, HOSTS_PLURAL, obj["metadata"]["name"])
    fleet = Fleet(lab, api_client, extra_args=tuple(getattr(request.module, "DAEMON_ARGS", ())))
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
