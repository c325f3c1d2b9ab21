"""A daemon that stops hands the generic controller's Lease back, so another takes over at once
instead of waiting for the lease to run out."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.support.daemons import start_daemon
from tests.support.lab_access import LabInfo
from tests.support.waiting import eventually

LEASE = "vm-api-generic-controller"


@pytest.fixture
def lease_namespace(api_client: client.ApiClient) -> Iterator[str]:
    core = client.CoreV1Api(api_client)
    name = "lease-" + uuid.uuid4().hex[:8]
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def test_a_stopping_leader_releases_the_lease_to_the_next_daemon(
    lab: LabInfo, api_client: client.ApiClient, lease_namespace: str
) -> None:
    leases = client.CoordinationV1Api(api_client)
    first, first_log = start_daemon(
        lab, host="handover-a", log_name="e2e-handover-a.log", lease_namespace=lease_namespace
    )
    second = None
    try:
        eventually(
            lambda: "leads: starting the generic controller" in first_log.read_text(),
            timeout=60,
            what=f"the first daemon leading ({first_log})",
        )
        second, second_log = start_daemon(
            lab, host="handover-b", log_name="e2e-handover-b.log", lease_namespace=lease_namespace
        )
        eventually(
            lambda: "is waiting for the lease" in second_log.read_text(),
            timeout=60,
            what=f"the second daemon waiting for the Lease ({second_log})",
        )
        assert "leads:" not in second_log.read_text()

        first.terminate()
        assert first.wait(timeout=60) == 0
        holder = leases.read_namespaced_lease(LEASE, lease_namespace).spec.holder_identity
        assert holder != f"handover-a-{first.pid}", "the stopped daemon still holds the Lease"
        assert "released the lease" in first_log.read_text()
        eventually(
            lambda: "leads: starting the generic controller" in second_log.read_text(),
            timeout=30,
            what=f"the second daemon taking over ({second_log})",
        )
        assert (
            leases.read_namespaced_lease(LEASE, lease_namespace).spec.holder_identity
            == f"handover-b-{second.pid}"
        )
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
