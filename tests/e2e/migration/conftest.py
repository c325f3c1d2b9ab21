"""Live migration between two of the lab's extra hosts: one daemon per host, each told its
host's migration address and TLS client credentials (docs/lab.md, "Migration links")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.support.daemons import Fleet
from tests.support.hosts import HOSTS_PLURAL, reset_host
from tests.support.kube import GROUP, V, install_api, namespace
from tests.support.lab_access import LabHost, LabInfo
from tests.support.waiting import eventually


def _migration_args(host: LabHost, extra: tuple[str, ...]) -> tuple[str, ...]:
    return (
        f"--migration-uri={host.migration_uri}",
        f"--migration-pkipath={host.migration_pkipath}",
        *extra,
    )


@pytest.fixture(scope="module")
def fleet(
    request: pytest.FixtureRequest, lab: LabInfo, api_client: client.ApiClient
) -> Iterator[Fleet]:
    """A daemon for each of the lab's first two hosts, set up to migrate between them. A
    module's `MIGRATION_DAEMON_ARGS` adds flags to both daemons (its limits, say)."""
    assert len(lab.hosts) >= 2, "migration needs two of the lab's extra hosts"
    assert lab.hosts[0].migration_pkipath is not None, "the lab predates its migration links"
    install_api(lab, api_client)
    custom = client.CustomObjectsApi(api_client)
    hosts = lab.hosts[:2]
    for obj in custom.list_cluster_custom_object(GROUP, V, HOSTS_PLURAL)["items"]:
        if obj["metadata"]["name"] not in {h.name for h in hosts}:
            custom.delete_cluster_custom_object(GROUP, V, HOSTS_PLURAL, obj["metadata"]["name"])
    extra = tuple(getattr(request.module, "MIGRATION_DAEMON_ARGS", ()))
    fleet = Fleet(lab, api_client, host_args=lambda host: _migration_args(host, extra))
    try:
        for host in hosts:
            reset_host(api_client, host.name)
        fleet.start_together(hosts)
        fleet.wait_hosts_ready([h.name for h in hosts])
        eventually(fleet.leader, timeout=60, what="one of the daemons leading")
        yield fleet
    finally:
        fleet.stop_all()


@pytest.fixture(scope="module")
def ns(fleet: Fleet, api_client: client.ApiClient) -> Iterator[str]:
    """One namespace for the module (its machines share it)."""
    with namespace(api_client) as name:
        yield name
