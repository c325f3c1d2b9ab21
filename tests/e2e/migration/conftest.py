"""Live migration between two of the lab's extra hosts: one daemon per host, each told its
host's migration address and the Secret its TLS client credentials come from (docs/lab.md,
"Migration links"; docs/migration.md, "What a host needs").

Every daemon writes its credentials itself: the lab's client folder of each host goes into a
Secret in the daemons' namespace, and the daemon gets `--migration-secret` and a fresh, empty
`--migration-pkipath` of its own, so every migration of this directory proves the Secret's way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.e2e.migration.credentials import (
    delete_migration_secret,
    migration_secret_name,
    put_migration_secret,
)
from tests.support.daemons import Fleet
from tests.support.hosts import HOSTS_PLURAL, reset_host
from tests.support.kube import GROUP, V, install_api, namespace
from tests.support.lab_access import LabHost, LabInfo
from tests.support.waiting import eventually


def _migration_args(host: LabHost, pki: Path, extra: tuple[str, ...]) -> tuple[str, ...]:
    return (
        f"--migration-uri={host.migration_uri}",
        f"--migration-secret={migration_secret_name(host)}",
        f"--migration-pkipath={pki / host.name}",
        *extra,
    )


@pytest.fixture(scope="module")
def fleet(
    request: pytest.FixtureRequest,
    lab: LabInfo,
    api_client: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Fleet]:
    """A daemon for each of the lab's first two hosts, set up to migrate between them, its
    credentials from its Secret. A module's `MIGRATION_DAEMON_ARGS` adds flags to both daemons
    (its limits, say)."""
    assert len(lab.hosts) >= 2, "migration needs two of the lab's extra hosts"
    assert lab.hosts[0].migration_pkipath is not None, "the lab predates its migration links"
    install_api(lab, api_client)
    custom = client.CustomObjectsApi(api_client)
    hosts = lab.hosts[:2]
    for obj in custom.list_cluster_custom_object(GROUP, V, HOSTS_PLURAL)["items"]:
        if obj["metadata"]["name"] not in {h.name for h in hosts}:
            custom.delete_cluster_custom_object(GROUP, V, HOSTS_PLURAL, obj["metadata"]["name"])
    extra = tuple(getattr(request.module, "MIGRATION_DAEMON_ARGS", ()))
    for host in hosts:
        put_migration_secret(api_client, host)
    # Made by each daemon on first use: nothing but the Secret puts credentials there.
    pki = tmp_path_factory.mktemp("migration-pki")
    fleet = Fleet(lab, api_client, host_args=lambda host: _migration_args(host, pki, extra))
    try:
        for host in hosts:
            reset_host(api_client, host.name)
        fleet.start_together(hosts)
        fleet.wait_hosts_ready([h.name for h in hosts])
        eventually(fleet.leader, timeout=60, what="one of the daemons leading")
        yield fleet
    finally:
        fleet.stop_all()
        for host in hosts:
            delete_migration_secret(api_client, host)


@pytest.fixture(scope="module")
def ns(fleet: Fleet, api_client: client.ApiClient) -> Iterator[str]:
    """One namespace for the module (its machines share it)."""
    with namespace(api_client) as name:
        yield name
