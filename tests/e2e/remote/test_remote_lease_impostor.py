"""A local daemon whose --host (a node's name) is a remote host's does not take that host's
heartbeat Lease from the replica serving it (issue 24, item 9): it says why in its log and on
/readyz, and the replica keeps the claim."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.support.daemons import (
    RemoteDaemon,
    health_base,
    start_daemon,
    start_remote_daemon,
)
from tests.support.hosts import (
    delete_secret,
    forget_host,
    lease_holder,
    put_secret,
    set_host,
    ssh_data,
)
from tests.support.lab_access import LabInfo, LabRemote
from tests.support.waiting import eventually

SECRET = "e2e-remote-impostor"
REPLICA = "e2e-replica-held"


@pytest.fixture
def replica(
    lab: LabInfo, remote_api: client.ApiClient, remote: LabRemote
) -> Iterator[RemoteDaemon]:
    put_secret(remote_api, SECRET, ssh_data(remote))
    set_host(remote_api, remote, {"uri": remote.ssh_uri, "secretRef": {"name": SECRET}})
    daemon = start_remote_daemon(lab, remote, REPLICA, generic=False)
    try:
        yield daemon
    finally:
        if daemon.proc.poll() is None:
            daemon.stop()
        forget_host(remote_api, remote)
        delete_secret(remote_api, SECRET)


def _readyz(base: str) -> str:
    try:
        with urllib.request.urlopen(f"{base}/readyz", timeout=5) as resp:
            return str(resp.read().decode())
    except urllib.error.HTTPError as err:
        return str(err.read().decode())


def test_a_local_daemon_named_like_a_remote_host_does_not_take_its_lease(
    lab: LabInfo, remote_api: client.ApiClient, remote: LabRemote, replica: RemoteDaemon
) -> None:
    eventually(
        lambda: lease_holder(remote_api, remote.name) == REPLICA,
        timeout=60,
        what=f"{REPLICA} holding the remote host's Lease",
    )
    proc, log = start_daemon(
        lab, host=remote.name, log_name="e2e-lease-impostor.log", generic=False
    )
    try:
        base = health_base(proc, log)
        refusal = "does not take it over"
        eventually(
            lambda: refusal in log.read_text(errors="replace"),
            timeout=60,
            what=f"the local daemon refusing the Lease (log: {log})",
        )
        # Its heartbeat ran (the refusal is its first beat's) and the claim is still the replica's.
        assert lease_holder(remote_api, remote.name) == REPLICA
        eventually(
            lambda: "heartbeat:" in _readyz(base) and refusal in _readyz(base),
            timeout=30,
            what="/readyz naming the refused heartbeat",
        )
        assert f"held by {REPLICA}" in _readyz(base)
        assert lease_holder(remote_api, remote.name) == REPLICA
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
