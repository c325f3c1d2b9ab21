"""Two replicas of the remote-mode daemon: one serves the remote host, and when it dies another
takes the host over within the stated time, and serves its machines."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from libvirt_provider import constants as c
from libvirt_provider.adapters.host.remote import takeover_seconds
from tests.support.daemons import RemoteDaemon, start_remote_daemon
from tests.support.factories import remote_pair
from tests.support.hosts import (
    delete_secret,
    forget_host,
    lease_holder,
    put_secret,
    set_host,
    ssh_data,
    wait_connected,
)
from tests.support.kube import create, namespace, patch_vm, wait_ready
from tests.support.lab_access import LabInfo, LabRemote
from tests.support.waiting import eventually

SECRET = "e2e-remote-takeover"
# Half the usual grace: the takeover waits out the dead holder's Lease, 20 s less.
GRACE = 20.0
TAKEOVER_SECONDS = takeover_seconds(GRACE)


@pytest.fixture
def replicas(
    lab: LabInfo, remote_api: client.ApiClient, remote: LabRemote
) -> Iterator[dict[str, RemoteDaemon]]:
    put_secret(remote_api, SECRET, ssh_data(remote))
    set_host(remote_api, remote, {"uri": remote.ssh_uri, "secretRef": {"name": SECRET}})
    running = {
        name: start_remote_daemon(lab, remote, name, extra_args=(f"--heartbeat-grace={GRACE:g}",))
        for name in ("e2e-replica-a", "e2e-replica-b")
    }
    try:
        yield running
    finally:
        for daemon in running.values():
            if daemon.proc.poll() is None:
                daemon.stop()
        forget_host(remote_api, remote)
        delete_secret(remote_api, SECRET)


def test_a_dead_replica_hosts_are_taken_over(
    remote_api: client.ApiClient, remote: LabRemote, replicas: dict[str, RemoteDaemon]
) -> None:
    first = eventually(
        lambda: (
            lease_holder(remote_api, remote.name) in replicas
            and lease_holder(remote_api, remote.name)
        ),
        timeout=60,
        what="one replica holding the remote host",
    )
    wait_connected(remote_api, remote, c.REASON_CONNECTED)
    (other,) = (name for name in replicas if name != first)
    # Only the holder serves the host: the other replica never connected to it.
    assert f"serves remote host {remote.name}" not in replicas[other].text()
    with namespace(remote_api) as ns:
        create(remote_api, remote_pair(ns, "survivor", remote, powerState="PoweredOff"))
        wait_ready(remote_api, ns, "survivor", what="the machine built by the first holder")
        replicas[first].stop(kill=True)
        killed = time.monotonic()
        eventually(
            lambda: lease_holder(remote_api, remote.name) == other,
            timeout=TAKEOVER_SECONDS + 20,
            interval=0.5,
            what=f"{other} holding the remote host",
        )
        took = time.monotonic() - killed
        assert took <= TAKEOVER_SECONDS + 10, f"takeover took {took:.0f} s"
        wait_connected(remote_api, remote, c.REASON_CONNECTED)
        # The new holder serves the machine: powering it on boots it there.
        patch_vm(remote_api, ns, "survivor", {"powerState": "PoweredOn"})
        wait_ready(
            remote_api,
            ns,
            "survivor",
            what="the machine running under the new holder",
            addresses=True,
        )
        assert f"serves remote host {remote.name}" in replicas[other].text()
