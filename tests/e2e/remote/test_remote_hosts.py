"""A remote host served by a daemon in remote mode: machines over ssh and TLS, and every way the
connection can be wrong, each reported on the LibvirtHost's `Connected` condition (and on the
machines as `HostUnreachable`) with nothing built on the host.

One daemon for the module (it also runs the generic controller); the host object is
reconfigured by each test. Tests that break the host (sshd, host key) restore it themselves.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from tests.support.daemons import RemoteDaemon, start_remote_daemon
from tests.support.factories import remote_pair
from tests.support.hosts import (
    delete_secret,
    forget_host,
    host,
    host_events,
    lease_holder,
    put_secret,
    set_host,
    ssh_data,
    tls_data,
    wait_connected,
)
from tests.support.kube import (
    GROUP,
    V,
    condition,
    create,
    delete_vm_and_wait,
    domain_of,
    get,
    namespace,
    wait_ready,
)
from tests.support.lab_access import (
    LabInfo,
    LabRemote,
    remote_rotate_host_key,
    remote_sshd_start,
    remote_sshd_stop,
)
from tests.support.virt import host_domains, host_volumes
from tests.support.waiting import eventually

SECRET = "e2e-remote-credentials"


@pytest.fixture(scope="module")
def daemon(lab: LabInfo, remote_api: client.ApiClient, remote: LabRemote) -> Iterator[RemoteDaemon]:
    put_secret(remote_api, SECRET, ssh_data(remote))
    set_host(remote_api, remote, {"uri": remote.ssh_uri, "secretRef": {"name": SECRET}})
    started = start_remote_daemon(lab, remote, "e2e-remote-a")
    try:
        eventually(
            lambda: "leads: starting the generic controller" in started.text(),
            timeout=60,
            what=f"the remote daemon leading the generic controller (log: {started.log})",
        )
        yield started
    finally:
        started.stop()
        forget_host(remote_api, remote)
        delete_secret(remote_api, SECRET)


@pytest.fixture
def ns(remote_api: client.ApiClient, daemon: RemoteDaemon) -> Iterator[str]:
    with namespace(remote_api) as name:
        yield name


def connect(api: client.ApiClient, remote: LabRemote, uri: str, data: dict[str, bytes]) -> None:
    """Point the host at `uri` with these credentials and wait until it is connected."""
    put_secret(api, SECRET, data)
    set_host(api, remote, {"uri": uri, "secretRef": {"name": SECRET}})
    wait_connected(api, remote, c.REASON_CONNECTED)


def machine_condition(api: client.ApiClient, ns: str, name: str, *, vm: bool) -> dict[str, Any]:
    return condition(
        get(api, ns, name, vm=vm),
        "InfrastructureReady" if not vm else "Ready",
    )


def wait_unreachable(api: client.ApiClient, ns: str, name: str) -> None:
    """Until the machine and its VM both say HostUnreachable (nothing is built meanwhile)."""

    def reasons(vm: bool) -> set[str]:
        obj = get(api, ns, name, vm=vm) or {}
        return {str(x.get("reason")) for x in (obj.get("status") or {}).get("conditions") or []}

    eventually(
        lambda: c.REASON_HOST_UNREACHABLE in reasons(False) & reasons(True),
        timeout=60,
        what=f"{name} HostUnreachable on the LibvirtMachine and the VirtualMachine",
    )


def lifecycle(api: client.ApiClient, remote: LabRemote, ns: str, name: str) -> None:
    """A pinned machine to Ready with its address, built on the remote host only, then deleted
    with nothing left there."""
    create(api, remote_pair(ns, name, remote))
    status = wait_ready(api, ns, name, what=f"{name} Ready on the remote host", addresses=True)
    assert status["addresses"], status
    domain = domain_of(api, ns, name)
    assert domain in host_domains(remote)
    machine = get(api, ns, name, vm=False) or {}
    assert machine["status"]["providerMetadata"]["host"] == remote.name
    delete_vm_and_wait(api, ns, name, what=f"{name} deleted")
    assert domain not in host_domains(remote)
    assert host_volumes(remote, domain) == []


def test_a_machine_over_ssh_runs_on_the_remote_host_and_is_removed(
    remote_api: client.ApiClient, remote: LabRemote, ns: str
) -> None:
    connect(remote_api, remote, remote.ssh_uri, ssh_data(remote))
    obj = host(remote_api, remote.name)
    assert condition(obj, c.HOST_CONDITION_READY)["status"] == "True"
    assert remote.pool in obj["status"]["offers"]["pools"]
    assert remote.network in obj["status"]["offers"]["networks"]
    lifecycle(remote_api, remote, ns, "over-ssh")


def test_a_machine_over_tls_runs_on_the_remote_host_and_is_removed(
    remote_api: client.ApiClient, remote: LabRemote, ns: str
) -> None:
    connect(remote_api, remote, remote.tls_uri, tls_data(remote))
    lifecycle(remote_api, remote, ns, "over-tls")


def test_libssh_connects_with_the_same_secret(
    remote_api: client.ApiClient, remote: LabRemote, daemon: RemoteDaemon
) -> None:
    connect(remote_api, remote, remote.libssh_uri, ssh_data(remote))
    assert condition(host(remote_api, remote.name), c.HOST_CONDITION_READY)["status"] == "True"


def test_a_key_the_host_refuses_is_authentication_failed_and_nothing_is_built(
    remote_api: client.ApiClient, remote: LabRemote, ns: str
) -> None:
    connect(remote_api, remote, remote.ssh_uri, ssh_data(remote))
    put_secret(remote_api, SECRET, ssh_data(remote, key=remote.wrong_ssh_key))
    cond = wait_connected(remote_api, remote, c.REASON_AUTHENTICATION_FAILED)
    assert cond["status"] == "False"
    assert "Permission denied" in cond["message"] or "auth" in cond["message"].lower()
    reasons = {e.reason for e in host_events(remote_api, remote.name)}
    assert c.REASON_AUTHENTICATION_FAILED in reasons
    # The host is not Ready, and a machine pinned to it waits there.
    assert condition(host(remote_api, remote.name), c.HOST_CONDITION_READY)["status"] == "False"
    create(remote_api, remote_pair(ns, "refused", remote, powerState="PoweredOff"))
    wait_unreachable(remote_api, ns, "refused")
    assert domain_of(remote_api, ns, "refused") not in host_domains(remote)
    # A rotation back to the right key is picked up without a restart, and the machine is built.
    put_secret(remote_api, SECRET, ssh_data(remote))
    wait_connected(remote_api, remote, c.REASON_CONNECTED)
    wait_ready(remote_api, ns, "refused", what="the machine Ready after the key was fixed")


def test_a_changed_host_key_is_host_key_mismatch_until_known_hosts_is_updated(
    remote_api: client.ApiClient, remote: LabRemote, ns: str
) -> None:
    connect(remote_api, remote, remote.ssh_uri, ssh_data(remote))
    old = ssh_data(remote)
    remote_rotate_host_key()
    # The Secret still holds the old known_hosts line: the session the rotation ended is not
    # reopened.
    cond = wait_connected(remote_api, remote, c.REASON_HOST_KEY_MISMATCH)
    assert "Host key" in cond["message"] or "host key" in cond["message"]
    create(remote_api, remote_pair(ns, "mismatch", remote, powerState="PoweredOff"))
    wait_unreachable(remote_api, ns, "mismatch")
    assert domain_of(remote_api, ns, "mismatch") not in host_domains(remote)
    assert ssh_data(remote)["known_hosts"] != old["known_hosts"]
    put_secret(remote_api, SECRET, ssh_data(remote))
    wait_connected(remote_api, remote, c.REASON_CONNECTED)
    wait_ready(remote_api, ns, "mismatch", what="the machine Ready once known_hosts was updated")


def test_a_missing_secret_is_secret_not_found_then_picked_up_when_created(
    remote_api: client.ApiClient, remote: LabRemote, daemon: RemoteDaemon
) -> None:
    missing = f"e2e-remote-missing-{uuid.uuid4().hex[:6]}"
    set_host(remote_api, remote, {"uri": remote.ssh_uri, "secretRef": {"name": missing}})
    cond = wait_connected(remote_api, remote, c.REASON_SECRET_NOT_FOUND)
    assert missing in cond["message"]
    try:
        put_secret(remote_api, missing, ssh_data(remote))
        wait_connected(remote_api, remote, c.REASON_CONNECTED)
    finally:
        delete_secret(remote_api, missing)


def test_sshd_down_is_unreachable_and_the_host_comes_back_by_itself(
    remote_api: client.ApiClient, remote: LabRemote, daemon: RemoteDaemon
) -> None:
    connect(remote_api, remote, remote.ssh_uri, ssh_data(remote))
    remote_sshd_stop()
    try:
        cond = wait_connected(remote_api, remote, c.REASON_UNREACHABLE)
        assert cond["status"] == "False"
    finally:
        remote_sshd_start()
    wait_connected(remote_api, remote, c.REASON_CONNECTED, timeout=120)
    assert daemon.proc.poll() is None


@dataclass(frozen=True)
class BadInput:
    uri: str
    reason: str
    says: str
    data: dict[str, bytes] | None = None
    namespace: str | None = None


BAD_INPUTS = {
    "tcp-transport": BadInput(
        "qemu+tcp://{address}/system",
        c.REASON_INVALID_CONNECTION,
        "neither encrypted nor authenticated",
    ),
    "no-verify-parameter": BadInput(
        "qemu+ssh://root@{address}/system?no_verify=1",
        c.REASON_INVALID_CONNECTION,
        "query parameters are not accepted",
    ),
    "secret-shape": BadInput(
        "qemu+ssh://root@{address}/system",
        c.REASON_INVALID_SECRET,
        "lacks known_hosts",
        data={"ssh-privatekey": b"not a key at all"},
    ),
    "secret-namespace": BadInput(
        "qemu+ssh://root@{address}/system",
        c.REASON_SECRET_NOT_ALLOWED,
        "daemon's own namespace",
        namespace="default",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_connections_are_refused_before_connecting(
    remote_api: client.ApiClient, remote: LabRemote, ns: str, case: BadInput
) -> None:
    connect(remote_api, remote, remote.ssh_uri, ssh_data(remote))
    secret_ref: dict[str, str] = {"name": SECRET}
    if case.namespace is not None:
        secret_ref["namespace"] = case.namespace
    if case.data is not None:
        put_secret(remote_api, SECRET, case.data)
    set_host(
        remote_api,
        remote,
        {"uri": case.uri.format(address=remote.address), "secretRef": secret_ref},
    )
    cond = wait_connected(remote_api, remote, case.reason)
    assert case.says in cond["message"]
    assert case.reason in {e.reason for e in host_events(remote_api, remote.name)}
    create(remote_api, remote_pair(ns, "bad-input", remote, powerState="PoweredOff"))
    wait_unreachable(remote_api, ns, "bad-input")
    assert domain_of(remote_api, ns, "bad-input") not in host_domains(remote)
    # Fixed, the host connects again and the machine is built; the namespace's cleanup then
    # removes it.
    connect(remote_api, remote, remote.ssh_uri, ssh_data(remote))
    eventually(
        lambda: machine_condition(remote_api, ns, "bad-input", vm=False).get("status") == "True",
        timeout=180,
        what="the machine built once the connection was fixed",
    )


def test_key_material_never_appears_in_logs_objects_or_events(
    remote_api: client.ApiClient, remote: LabRemote, daemon: RemoteDaemon
) -> None:
    """After every test above (the module's order): the daemon's log, the LibvirtHost and every
    Event name no line of the private keys or TLS keys the daemon was given."""
    secrets: list[bytes] = [
        remote.ssh_key.read_bytes(),
        remote.wrong_ssh_key.read_bytes(),
        remote.tls_key.read_bytes(),
    ]
    needles = set()
    for material in secrets:
        for line in material.decode().splitlines():
            if len(line) >= 20 and not line.startswith("-----"):
                needles.add(line)
        needles.add(base64.b64encode(material).decode()[:40])
    assert needles
    obj = str(host(remote_api, remote.name))
    events = client.CoreV1Api(remote_api).list_event_for_all_namespaces()
    texts = {
        "the daemon's log": daemon.text(),
        "the LibvirtHost": obj,
        "the Events": "\n".join(f"{e.reason} {e.message}" for e in events.items),
    }
    for where, text in texts.items():
        leaked = [n[:12] + "..." for n in needles if n in text]
        assert not leaked, f"key material in {where}: {leaked}"


def test_the_daemon_log_and_credentials_directory(
    lab: LabInfo, remote: LabRemote, daemon: RemoteDaemon
) -> None:
    """Credentials are files only the daemon's user can read."""
    root = subprocess.run(
        ["find", f"{lab.dir}/remote-credentials", "-type", "f", "-printf", "%m %p\n"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    files = [line.split(" ", 1) for line in root if line]
    assert files, "no credential files while the host is served"
    for mode, path in files:
        expected = "700" if path.endswith("/ssh") else "600"
        assert mode == expected, f"{path} has mode {mode}"


def test_a_deleted_remote_host_is_let_go_and_stays_deleted(
    lab: LabInfo, remote_api: client.ApiClient, remote: LabRemote, daemon: RemoteDaemon
) -> None:
    """Last: deleting the LibvirtHost ends its service (the claim is handed back) and nothing
    creates the object again (it is the user's declaration, unlike a local host's)."""
    connect(remote_api, remote, remote.ssh_uri, ssh_data(remote))
    forget_host(remote_api, remote)
    eventually(
        lambda: f"no longer serves remote host {remote.name}" in daemon.text(),
        timeout=60,
        what="the daemon letting the deleted host go",
    )
    eventually(
        lambda: not lease_holder(remote_api, remote.name),
        timeout=30,
        what="the host's Lease handed back",
    )
    with pytest.raises(ApiException) as gone:
        client.CustomObjectsApi(remote_api).get_cluster_custom_object(
            GROUP, V, "libvirthosts", remote.name
        )
    assert gone.value.status == 404
    assert not list((Path(lab.dir) / "remote-credentials").glob(f"*/{remote.name}"))
