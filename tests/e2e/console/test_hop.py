"""The hop between daemons (docs/console.md, "Routing"): two daemons on two of the lab's hosts, the
APIService pointing at daemon A only, and a busybox guest on daemon B's host. A user's `kubectl vm
console` reaches A through the API server, A forwards it over mutual TLS to B, and the guest's
shell answers (and so do its VNC display, its statistics, lists of them, and a port-forward). B's
hop port takes only certificates from the console CA; B reviews the user again; a request that
already hopped is never forwarded again; a host whose daemon cannot be reached gets a 503 that says
why.

Its own fixtures (not conftest's single daemon): the two daemons run with a token of deploy/'s
ServiceAccount (so deploy/'s RBAC, which lets them read each other's heartbeat Leases, is what is
proven enough) and a certificate from the lab's console CA made for both server and client use,
as a hop needs.

Last, a machine on the lab's remote host: its remote-mode replica publishes its hop address in the
host's claim (the Lease it holds), and a console sent to A hops there. The replica also keeps the
remote guest's console log itself (--console-log-dir, a small --console-log-bytes): with no
session ever attached, `--logs` prints the guest's boot; a line typed later is in it after the
log rotated; `--logs --follow` prints the file, then new output; deleting the machine removes the
files. These three tests share the remote guest of the hop's test (one boot for the four), and
run first, before any session attached to it.

Cost: 13 tests, about 55 s warm on the shared 2-core machine (the remote part 30 to 40 s: the
replica's start and the guest's boot 3 to 11 s, waiting for the boot line in --logs 6 to 8 s, the
typed line and the rotation 2.5 to 7 s, --follow 6 s, the hop's console 2 s, the machine's
deletion and its log's removal 6 to 9 s), most of it the daemons' starts and the guests' boots.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
import socket
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libvirt
import pytest
from kubernetes import client

from libvirt_provider import constants as c
from libvirt_provider.console.portforward import guest_address
from tests.support.console import (
    Plugin,
    PortForward,
    bind_console,
    bind_portforward,
    direct_request,
    grant_machine_reading,
    grant_stats,
    run_forward_stdio,
    run_top,
    top_rows,
    user_kubeconfig,
)
from tests.support.daemons import (
    RemoteDaemon,
    free_port,
    start_remote_daemon,
)
from tests.support.factories import pair, remote_pair
from tests.support.hop import LEASES, Hops, Pki, hop_daemons, hop_lease, hop_pki
from tests.support.hosts import (
    delete_secret,
    forget_host,
    put_secret,
    set_host,
    ssh_data,
)
from tests.support.kube import (
    apply,
    create,
    delete_vm_and_wait,
    get,
    namespace,
    service_account_kubeconfig,
)
from tests.support.lab_access import REPO, LabInfo, LabRemote
from tests.support.port_echo import echo_round
from tests.support.vnc import VncForward, bind_vnc, libvirt_screen_size, rfb_server_init
from tests.support.waiting import GiveUp, eventually

REMOTE_SECRET = "e2e-hop-remote"
# The remote-mode replica's --console-log-bytes: small, so a test rotates its log cheaply.
KEPT_LOG_BYTES = 16 * 1024
CONSOLE_PATH = (
    "/apis/subresources.infrastructure.vm-api.io/v1alpha1/namespaces/{ns}"
    "/libvirtmachines/{name}/console"
)


@pytest.fixture(scope="module")
def pki(lab: LabInfo, tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return hop_pki(lab, tmp_path_factory.mktemp("hop-pki"))


@pytest.fixture(scope="module")
def daemons(
    lab: LabInfo,
    api_client: client.ApiClient,
    pki: Pki,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Hops]:
    """Daemon A on the lab's first extra host, B on its second (tests/support/hop.py)."""
    with hop_daemons(
        lab, api_client, pki, tmp_path_factory.mktemp("hop"), log_prefix="e2e-hop"
    ) as hops:
        yield hops


@pytest.fixture(scope="module")
def guest_ns(api_client: client.ApiClient, daemons: Hops) -> Iterator[str]:
    """A busybox guest `guest` on daemon B's host, running, with a VNC display."""
    b = daemons.b
    with namespace(api_client) as ns:
        vm, lm = pair(ns, "guest")
        lm["metadata"]["labels"][c.HOST_LABEL] = b.host.name
        lm["spec"]["host"] = b.host.name
        lm["spec"]["console"] = {"graphics": "VNC"}
        create(api_client, [vm, lm])

        def running() -> dict[str, Any] | None:
            found = get(api_client, ns, "guest", vm=False)
            status = (found or {}).get("status") or {}
            return found if status.get("powerState") == "PoweredOn" else None

        eventually(running, timeout=180, what=f"LibvirtMachine {ns}/guest PoweredOn on B's host")
        yield ns


def _answered(plugin: Plugin, marker: str) -> bool:
    if plugin.process.poll() is not None:
        raise GiveUp(f"kubectl vm exited {plugin.process.returncode}: {plugin.errors}")
    if f"{marker}-42" in plugin.output:
        return True
    plugin.type(f"echo {marker}-$((6*7))\n")
    return f"{marker}-42" in plugin.output


def _typed_through_the_hop(
    lab: LabInfo, api_client: client.ApiClient, ns: str, name: str, tmp_path: Path
) -> str:
    """A user bound to the console role types into machine `name`'s shell with `kubectl vm
    console` (the APIService sends it to A) until the shell answers; the user's name."""
    kubeconfig = tmp_path / "operator.kubeconfig"
    user = user_kubeconfig(lab, api_client, kubeconfig, namespace=ns, name=f"{name}-operator")
    bind_console(api_client, ns, user)
    marker = "VMAPI-HOP-" + uuid.uuid4().hex[:8]
    plugin = Plugin(kubeconfig, ns, name)
    try:
        eventually(
            lambda: _answered(plugin, marker),
            timeout=60,
            interval=2,
            what=f"{name}'s answer through the hop ({plugin.errors})",
        )
    finally:
        assert plugin.leave() == 0, plugin.errors
    return user


def test_a_console_on_daemon_bs_host_works_through_daemon_a(
    lab: LabInfo,
    api_client: client.ApiClient,
    daemons: Hops,
    guest_ns: str,
    tmp_path: Path,
) -> None:
    a, b = daemons.a, daemons.b
    user = _typed_through_the_hop(lab, api_client, guest_ns, "guest", tmp_path)
    # A forwarded it; B (not A) opened the console, for the user A authenticated.
    a_log, b_log = a.log.read_text(), b.log.read_text()
    assert re.search(
        rf"{re.escape(user)}'s GET \S+/guest/console hops to host {b.host.name}", a_log
    )
    assert f"console: {user} attached to {guest_ns}/guest as writer" in b_log
    assert f"console: {user} attached to {guest_ns}/guest" not in a_log


ADMIN_GROUPS = ("system:masters", "system:authenticated")


def test_kubectl_vm_top_for_the_machine_on_bs_host_answers_through_daemon_a(
    lab: LabInfo, api_client: client.ApiClient, daemons: Hops, guest_ns: str, tmp_path: Path
) -> None:
    """One machine's statistics: A finds the machine on B's host and hops; B reviews the user and
    takes the figures from its own libvirt."""
    kubeconfig = tmp_path / "viewer.kubeconfig"
    user = user_kubeconfig(lab, api_client, kubeconfig, namespace=guest_ns, name="viewer")
    grant_stats(api_client, guest_ns, user)
    grant_machine_reading(api_client, guest_ns, user)

    def row() -> dict[str, str] | None:
        code, out, err = run_top(kubeconfig, "guest", "-n", guest_ns)
        # The RoleBindings may need a moment to reach the authorizers.
        if code != 0 and "Forbidden" in err:
            return None
        assert code == 0, err
        rows = [r for r in top_rows(out) if r["NAME"] == "guest" and r["STATE"] == "Running"]
        return rows[0] if rows else None

    found = eventually(row, timeout=60, interval=1.0, what="kubectl vm top through the hop")
    assert found["HOST"] == daemons.b.host.name
    assert f"{user}'s GET" in daemons.a.log.read_text()


def test_kubectl_vm_top_lists_reach_the_machines_of_every_daemons_hosts(
    lab: LabInfo, api_client: client.ApiClient, daemons: Hops, guest_ns: str, tmp_path: Path
) -> None:
    """A namespace's list and one host's list, sent to A, which holds none of the namespace's
    machines: A asks B for its host's figures (over the hop, for the same user) and lists them."""
    kubeconfig = tmp_path / "lister.kubeconfig"
    user = user_kubeconfig(lab, api_client, kubeconfig, namespace=guest_ns, name="lister")
    grant_stats(api_client, guest_ns, user)
    grant_machine_reading(api_client, guest_ns, user)
    b = daemons.b.host.name

    def rows(*args: str) -> list[dict[str, str]] | None:
        code, out, err = run_top(kubeconfig, "-n", guest_ns, *args)
        if code != 0 and "Forbidden" in err:
            return None  # the RoleBindings on their way to the authorizers
        assert code == 0, err
        found = top_rows(out)
        return found if any(r["STATE"] == "Running" for r in found) else None

    listed = eventually(rows, timeout=60, interval=1.0, what="kubectl vm top -n through A")
    assert [(r["NAME"], r["HOST"]) for r in listed] == [("guest", b)]
    on_b = eventually(lambda: rows("--host", b), timeout=30, what="kubectl vm top --host B")
    assert [(r["NAME"], r["HOST"]) for r in on_b] == [("guest", b)]
    # A's own host has none of them.
    assert rows("--host", daemons.a.host.name) is None


def test_kubectl_vm_vnc_to_the_guest_on_bs_host_speaks_rfb_through_daemon_a(
    lab: LabInfo, api_client: client.ApiClient, daemons: Hops, guest_ns: str, tmp_path: Path
) -> None:
    """The display's WebSocket crosses the hop as the console's does: the RFB handshake comes
    back from B's libvirt, with the guest's screen size."""
    kubeconfig = tmp_path / "watcher.kubeconfig"
    user = user_kubeconfig(lab, api_client, kubeconfig, namespace=guest_ns, name="watcher")
    bind_vnc(api_client, guest_ns, user)
    forward = VncForward(kubeconfig, guest_ns, "guest")
    try:
        version, init = rfb_server_init(forward.port)
    finally:
        forward.stop()
    assert version == (3, 8), forward.errors
    uid = str((get(api_client, guest_ns, "guest", vm=False) or {})["metadata"]["uid"])
    conn = libvirt.open(daemons.b.host.uri)
    try:
        assert (init.width, init.height) == libvirt_screen_size(conn, uid)
    finally:
        conn.close()
    assert re.search(
        rf"{re.escape(user)}'s GET \S+/guest/vnc hops to host {daemons.b.host.name}",
        daemons.a.log.read_text(),
    )


ECHO_PORT = 7000
ECHO_BYTES = 1 << 20


def test_port_forward_to_the_guest_on_bs_host_works_through_daemon_a(
    lab: LabInfo, api_client: client.ApiClient, daemons: Hops, guest_ns: str, tmp_path: Path
) -> None:
    """An echo server in the guest (started through the hop, on the console), reached with
    `kubectl vm port-forward`: a line with `--stdio` (its half-close crosses the hop), then 1 MiB
    both ways at once, which a relay that blocked on one direction would stall."""
    console = Plugin(Path(lab.kubeconfig), guest_ns, "guest")
    marker = "VMAPI-HOP-ECHO-" + uuid.uuid4().hex[:8]

    def started() -> bool:
        if console.process.poll() is not None:
            raise GiveUp(f"kubectl vm console exited: {console.errors}")
        if f"{marker}-42" in console.output:
            return True
        console.type(f"(nc -ll -p {ECHO_PORT} -e cat &) ; echo {marker}-$((6*7))\n")
        return f"{marker}-42" in console.output

    try:
        eventually(started, timeout=60, interval=1.0, what="nc listening in the guest")
    finally:
        assert console.leave() == 0, console.errors
    eventually(
        lambda: guest_address(get(api_client, guest_ns, "guest", vm=False) or {}),
        timeout=120,
        what="the guest's address in its status",
    )
    kubeconfig = tmp_path / "forwarder.kubeconfig"
    user = user_kubeconfig(lab, api_client, kubeconfig, namespace=guest_ns, name="forwarder")
    bind_portforward(api_client, guest_ns, user)
    line = f"hop-{uuid.uuid4().hex}\n".encode()

    def through() -> tuple[int, bytes, str] | None:
        code, out, err = run_forward_stdio(kubeconfig, guest_ns, "guest", ECHO_PORT, line)
        # The RoleBinding may need a moment to reach the authorizers; nothing else is retried.
        return None if code == 1 and "(Forbidden)" in err else (code, out, err)

    code, out, err = eventually(through, timeout=60, what="the RoleBinding honoured")
    assert (code, out) == (0, line), err
    forward = PortForward(kubeconfig, guest_ns, "guest", f":{ECHO_PORT}")
    try:
        with socket.create_connection(("127.0.0.1", forward.local), timeout=30) as sock:
            seconds = echo_round(sock, ECHO_BYTES)
        print(f"\n1 MiB echoed through the hop in {seconds:.2f} s")
    finally:
        forward.stop()
    assert f"{user}'s GET" in daemons.a.log.read_text()
    assert f"console: {user} forwards to {guest_ns}/guest port {ECHO_PORT}" in (
        daemons.b.log.read_text()
    )


def _raw_hop(
    port: int,
    cert: tuple[Path, Path] | None,
    ca: Path,
    path: str,
    user: str,
    *,
    groups: tuple[str, ...] = ("system:authenticated",),
) -> tuple[int, str]:
    """A GET straight to a daemon's hop port, as another daemon would send it (one header per
    group: `direct_request` takes a dict, so the first group only)."""
    return direct_request(
        port, path, {"X-Remote-User": user, "X-Remote-Group": groups[0]}, cert=cert, ca=ca
    )


def _handshake_refused(port: int, cert: tuple[Path, Path] | None, ca: Path) -> str:
    """What a client sees when the hop port's TLS refuses it (TLS 1.3 reports a refused client
    certificate on the first read); fails when a request is answered instead."""
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
            context.wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            tls.sendall(b"GET /apis HTTP/1.1\r\nHost: x\r\nX-Remote-User: system:admin\r\n\r\n")
            answer = tls.recv(4096)
    except (ssl.SSLError, OSError) as err:
        return str(err)
    assert answer == b"", f"the hop port answered: {answer[:200]!r}"
    return "closed"


def test_bs_hop_port_refuses_a_certificate_from_another_ca_or_none(
    daemons: Hops, guest_ns: str
) -> None:
    b = daemons.b
    for cert in (None, daemons.pki.rogue, daemons.pki.front_proxy):
        why = _handshake_refused(b.hop_port, cert, daemons.pki.ca)
        assert why, cert
    eventually(
        lambda: b.log.read_text().count("(hop port) failed") >= 3,
        timeout=30,
        what="daemon B logging the three refused handshakes",
    )
    # The hop port's name check: the console CA's certificate works (the control case).
    path = CONSOLE_PATH.format(ns=guest_ns, name="no-such-machine")
    code, body = _raw_hop(
        b.hop_port, daemons.pki.hop, daemons.pki.ca, path, "system:admin", groups=ADMIN_GROUPS
    )
    assert code == 404, body


def test_b_reviews_the_user_again_even_when_the_hop_comes_from_a(
    lab: LabInfo,
    api_client: client.ApiClient,
    daemons: Hops,
    guest_ns: str,
    tmp_path: Path,
) -> None:
    """A request with daemon A's own hop certificate (what A presents) for a user without RBAC:
    B's SubjectAccessReview refuses it; B does not take A's word for the authorization."""
    b = daemons.b
    user = user_kubeconfig(
        lab, api_client, tmp_path / "nobody.kubeconfig", namespace=guest_ns, name="nobody"
    )
    path = CONSOLE_PATH.format(ns=guest_ns, name="guest")
    code, body = _raw_hop(b.hop_port, daemons.pki.hop, daemons.pki.ca, path, user)
    assert code == 403, body
    assert json.loads(body)["reason"] == "Forbidden"
    assert user in json.loads(body)["message"]
    assert "from 127.0.0.1 (by hop) refused: 403" in b.log.read_text()


def test_a_request_that_hopped_is_not_forwarded_again(daemons: Hops, guest_ns: str) -> None:
    """A hop landing on A (which does not serve the guest's host) is answered 503, not sent on
    to B: no loops. The admin passes A's review, so the refusal is the routing's."""
    a, b = daemons.a, daemons.b
    path = CONSOLE_PATH.format(ns=guest_ns, name="guest")
    code, body = _raw_hop(
        a.hop_port, daemons.pki.hop, daemons.pki.ca, path, "system:admin", groups=ADMIN_GROUPS
    )
    assert code == 503, body
    message = json.loads(body)["message"]
    assert b.host.name in message
    assert "not forwarded again" in message


def test_an_unreachable_daemon_is_a_503_naming_the_host_and_why(
    api_client: client.ApiClient, daemons: Hops, guest_ns: str
) -> None:
    """A machine on host `ghost`, whose fresh heartbeat Lease publishes a port nobody listens
    on: daemon A's answer says it cannot reach ghost's daemon there."""
    a = daemons.a
    ghost = "hop-ghost-" + uuid.uuid4().hex[:6]
    dead_port = free_port()
    leases = client.CoordinationV1Api(api_client)
    now = dt.datetime.now(dt.UTC)
    leases.create_namespaced_lease(
        LEASES,
        {
            "metadata": {
                "name": f"libvirt-host-{ghost}",
                "annotations": {c.HOP_ADDRESS_ANNOTATION: f"127.0.0.1:{dead_port}"},
            },
            "spec": {
                "holderIdentity": ghost,
                "leaseDurationSeconds": 3600,
                "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        },
    )
    try:
        vm, lm = pair(guest_ns, "haunted")
        lm["metadata"]["labels"][c.HOST_LABEL] = ghost
        lm["spec"]["host"] = ghost
        create(api_client, [vm, lm])
        path = CONSOLE_PATH.format(ns=guest_ns, name="haunted")
        code, body = direct_request(
            a.port,
            path,
            {"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"},
            cert=daemons.pki.front_proxy,
            ca=daemons.pki.ca,
        )
        assert code == 503, body
        message = json.loads(body)["message"]
        assert f"cannot reach the daemon serving host {ghost} at 127.0.0.1:{dead_port}" in message
    finally:
        leases.delete_namespaced_lease(f"libvirt-host-{ghost}", LEASES)


# -- a remote host's machine: the hop reaches the remote-mode replica holding the host's Lease ----


@dataclass
class RemoteHop:
    remote: LabRemote
    daemon: RemoteDaemon
    hop_port: int
    ns: str  # the namespace of a busybox guest `far` on the remote host, running
    logs: Path  # the replica's --console-log-dir, where it keeps the remote host's console logs


def _forwarder(
    route: list[str], ready: Path, *, netns: str | None = None
) -> subprocess.Popen[bytes]:
    """tests/lab/forward.py along `route` (in `netns`), once it listens."""
    inside = ["ip", "netns", "exec", netns] if netns else []
    script = str(REPO / "tests" / "lab" / "forward.py")
    proc = subprocess.Popen(
        [*inside, sys.executable, script, *route, f"--ready={ready}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    eventually(
        lambda: ready.exists() or proc.poll() is not None,
        timeout=20,
        interval=0.05,
        what=f"forwarder {route} listening",
    )
    assert proc.poll() is None, f"forwarder {route} exited {proc.returncode}"
    return proc


@pytest.fixture(scope="module")
def remote_hop(
    lab: LabInfo,
    api_client: client.ApiClient,
    daemons: Hops,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RemoteHop]:
    """A remote-mode replica for the lab's remote host (in the remote's client namespace, as
    the lab runs remote mode), with a hop port. Daemon A must reach that port at the address the
    replica publishes, 127.0.0.1:<port>: two forwarders carry the machine's 127.0.0.1:<port>
    into the client namespace through a unix socket, as the lab carries the API server the
    other way (tests/lab/forward.py)."""
    remote = lab.remote
    if remote is None:
        pytest.fail("the lab has no remote host (VMAPI_LAB_REMOTE=0); run make lab-up", False)
    folder = tmp_path_factory.mktemp("hop-remote")
    sock = folder / "hop.sock"
    logs = folder / "console-logs"
    hop_port = free_port()
    forwarders = [
        _forwarder(
            ["unix", str(sock), "tcp", "127.0.0.1", str(hop_port)],
            folder / "client-ready",
            netns=remote.client_netns,
        )
    ]
    # The replica runs on deploy/remote's ServiceAccount: deploy/'s RBAC is what serves a hop.
    apply(lab, REPO / "deploy" / "remote" / "rbac.yaml")
    kubeconfig = folder / "remote.kubeconfig"
    service_account_kubeconfig(
        lab, api_client, kubeconfig, account="libvirt-provider-remote", namespace=LEASES
    )
    put_secret(api_client, REMOTE_SECRET, ssh_data(remote), ns=LEASES)
    set_host(api_client, remote, {"uri": remote.ssh_uri, "secretRef": {"name": REMOTE_SECRET}})
    replica: RemoteDaemon | None = None
    try:
        forwarders.append(
            _forwarder(
                ["tcp", "127.0.0.1", str(hop_port), "unix", str(sock)], folder / "host-ready"
            )
        )
        replica = start_remote_daemon(
            lab,
            remote,
            "e2e-hop-remote",
            generic=False,
            kubeconfig=str(kubeconfig),
            lease_namespace=LEASES,
            extra_args=(
                f"--console-port={free_port()}",
                "--console-address=127.0.0.1",
                f"--console-cert-file={daemons.pki.hop[0]}",
                f"--console-key-file={daemons.pki.hop[1]}",
                f"--console-hop-port={hop_port}",
                f"--console-hop-ca-file={daemons.pki.ca}",
                "--console-advertise-address=127.0.0.1",
                f"--console-log-dir={logs}",
                f"--console-log-bytes={KEPT_LOG_BYTES}",
            ),
        )
        eventually(
            lambda: hop_lease(api_client, remote.name) == f"127.0.0.1:{hop_port}",
            timeout=60,
            what=f"remote host {remote.name}'s Lease publishing the replica's hop address",
        )
        with namespace(api_client) as ns:
            create(api_client, remote_pair(ns, "far", remote))

            def running() -> bool:
                status = (get(api_client, ns, "far", vm=False) or {}).get("status") or {}
                return status.get("powerState") == "PoweredOn"

            eventually(running, timeout=180, what=f"LibvirtMachine {ns}/far PoweredOn remotely")
            yield RemoteHop(remote, replica, hop_port, ns, logs)
            delete_vm_and_wait(api_client, ns, "far", what="the remote machine deleted")
            # The replica forgets a deleted machine's log, as a host's daemon removes qemu's.
            eventually(
                lambda: not any(logs.iterdir()),
                timeout=30,
                what=f"the deleted machine's kept console log removed ({list(logs.iterdir())})",
            )
    finally:
        if replica is not None:
            replica.stop()
        forget_host(api_client, remote)
        delete_secret(api_client, REMOTE_SECRET, ns=LEASES)
        for proc in forwarders:
            proc.terminate()
            proc.wait(10)


def _logs(kubeconfig: Path, ns: str, name: str) -> str:
    """`kubectl vm console NAME --logs`: what it printed (it exits by itself, 0)."""
    plugin = Plugin(kubeconfig, ns, name, "--logs")
    assert plugin.process.wait(timeout=60) == 0, plugin.errors
    plugin.leave()
    return plugin.output


def test_a_remote_hosts_console_output_is_kept_with_no_session_and_read_with_logs(
    lab: LabInfo, api_client: client.ApiClient, daemons: Hops, remote_hop: RemoteHop, tmp_path: Path
) -> None:
    """Before anyone attached to the remote guest's console, its boot output is in the log the
    replica keeps, and `kubectl vm console --logs` (through A, which hops) prints it. A remote
    host's qemu log is on that host, out of the replica's reach: this is the replica's own."""
    ns = remote_hop.ns
    assert f"attached to {ns}/far" not in remote_hop.daemon.text(), "no session yet"
    kubeconfig = tmp_path / "reader.kubeconfig"
    user = user_kubeconfig(lab, api_client, kubeconfig, namespace=ns, name="far-reader")
    bind_console(api_client, ns, user)
    printed = ""

    def booted() -> bool:
        nonlocal printed
        printed = _logs(kubeconfig, ns, "far")
        return "VMAPI-GUEST-BOOTED" in printed

    eventually(booted, timeout=60, interval=2, what="far's boot output in its --logs")
    assert re.search(
        rf"console log of {re.escape(ns)}/far on host {re.escape(remote_hop.remote.name)}: kept",
        remote_hop.daemon.text(),
    )
    # --logs takes no seat and opens no session.
    assert f"attached to {ns}/far" not in remote_hop.daemon.text()
    assert remote_hop.daemon.refusals() == []


def test_a_line_typed_into_a_remote_console_is_in_its_rotated_log_afterwards(
    lab: LabInfo, api_client: client.ApiClient, daemons: Hops, remote_hop: RemoteHop, tmp_path: Path
) -> None:
    """A session shares the stream the replica keeps open (libvirt gives the console to one
    stream at a time): what the shell answers goes to the session and to the log. Output past
    --console-log-bytes rotates the log (`.1`), no file grows past the bound, and `--logs`
    reads across the rotation."""
    ns = remote_hop.ns
    kubeconfig = tmp_path / "typist.kubeconfig"
    user = user_kubeconfig(lab, api_client, kubeconfig, namespace=ns, name="far-typist")
    bind_console(api_client, ns, user)
    marker = "VMAPI-KEPT-" + uuid.uuid4().hex[:8]
    writer = Plugin(kubeconfig, ns, "far")
    try:
        # More than a file's bound of output, then the marker's answer.
        writer.type(f"seq 1 {KEPT_LOG_BYTES // 3}\n")
        eventually(lambda: _answered(writer, marker), timeout=60, interval=2,
                   what=f"far's shell answering ({writer.errors})")  # fmt: skip
    finally:
        assert writer.leave() == 0, writer.errors
    printed = _logs(kubeconfig, ns, "far")
    assert f"{marker}-42" in printed, printed[-2000:]
    current = next(remote_hop.logs.glob("*.serial.log"))
    rotated = Path(f"{current}.1")
    assert rotated.exists(), "the log rotated"
    sizes = [current.stat().st_size, rotated.stat().st_size]
    assert max(sizes) <= KEPT_LOG_BYTES, sizes
    # What --logs printed begins in the rotated file.
    assert rotated.read_bytes()[-64:].decode(errors="replace") in printed


def test_logs_follow_on_a_remote_host_prints_the_kept_log_then_new_output(
    lab: LabInfo, api_client: client.ApiClient, daemons: Hops, remote_hop: RemoteHop, tmp_path: Path
) -> None:
    """`--logs --follow`: the replica's file first (an answer typed before it started), then the
    output as it comes (one typed after), on the stream the replica keeps open."""
    ns = remote_hop.ns
    kubeconfig = tmp_path / "follower.kubeconfig"
    user = user_kubeconfig(lab, api_client, kubeconfig, namespace=ns, name="far-follower")
    bind_console(api_client, ns, user)
    before, after = ("VMAPI-BEFORE-" + uuid.uuid4().hex[:8], "VMAPI-AFTER-" + uuid.uuid4().hex[:8])
    writer = Plugin(kubeconfig, ns, "far")
    try:
        eventually(lambda: _answered(writer, before), timeout=60, interval=2,
                   what=f"far's shell answering ({writer.errors})")  # fmt: skip
        follow = Plugin(kubeconfig, ns, "far", "--logs", "--follow")
        try:
            eventually(lambda: f"{before}-42" in follow.output, timeout=30, interval=0.5,
                       what=f"the kept log's answer in --follow ({follow.errors})")  # fmt: skip
            eventually(lambda: _answered(writer, after), timeout=60, interval=2,
                       what=f"far's shell answering again ({writer.errors})")  # fmt: skip
            eventually(lambda: f"{after}-42" in follow.output, timeout=30, interval=0.5,
                       what=f"the new answer in --follow ({follow.errors})")  # fmt: skip
        finally:
            follow.process.send_signal(signal.SIGINT)
            assert follow.leave() == 0, follow.errors
    finally:
        assert writer.leave() == 0, writer.errors


def test_a_console_on_a_remote_host_works_through_daemon_a_and_the_replicas_hop(
    lab: LabInfo, api_client: client.ApiClient, daemons: Hops, remote_hop: RemoteHop, tmp_path: Path
) -> None:
    """The console of a machine on the remote host: A reads the host's Lease, held by the
    remote-mode replica, and hops there; the replica opens the console over its ssh connection
    to the host (`virDomainOpenConsole` on a remote URI)."""
    ns = remote_hop.ns
    user = _typed_through_the_hop(lab, api_client, ns, "far", tmp_path)
    assert re.search(
        rf"{re.escape(user)}'s GET \S+/far/console hops to host {remote_hop.remote.name}",
        daemons.a.log.read_text(),
    )
    assert f"console: {user} attached to {ns}/far as writer" in remote_hop.daemon.text()
    assert remote_hop.daemon.refusals() == [], "the replica met a 403 on deploy/'s RBAC"
