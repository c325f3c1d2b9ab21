"""Port-forward through Kubernetes, as a user reaches a guest's port: `kubectl vm port-forward`
with a ServiceAccount's token, through the lab's API server and its aggregation layer, to the
daemon, which dials the busybox guest inside the lab's network namespace (`--guest-netns`), where
the guest's isolated network is; the machine's own namespace has no way to it
(docs/console.md, "Port-forward and ssh").

The busybox guest runs nothing on TCP by itself: the module starts busybox's `nc -ll -p 7000 -e
cat` (an echo server, one `cat` per connection) through the serial console, as an admin. One
daemon and one booted guest serve the whole module with test_console.py's fixtures (conftest.py).
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from libvirt_provider.console.portforward import guest_address
from tests.support.console import (
    Plugin,
    PortForward,
    bind_portforward,
    run_forward_stdio,
    user_kubeconfig,
)
from tests.support.factories import pair
from tests.support.kube import create, get
from tests.support.lab_access import REPO, LabInfo
from tests.support.port_echo import echo_round
from tests.support.waiting import GiveUp, eventually

ECHO_PORT = 7000
CLOSED_PORT = 7001
THROUGHPUT_BYTES = 4 << 20


@pytest.fixture(scope="module")
def echo_guest(lab: LabInfo, api_client: client.ApiClient, guest_ns: str) -> tuple[str, str]:
    """The module's guest with an echo server on ECHO_PORT and an address in its status: its
    namespace and that address."""
    console = Plugin(Path(lab.kubeconfig), guest_ns, "guest")
    marker = "VMAPI-ECHO-" + uuid.uuid4().hex[:8]

    def started() -> bool:
        if console.process.poll() is not None:
            raise GiveUp(f"kubectl vm console exited: {console.errors}")
        if f"{marker}-42" in console.output:
            return True
        # A second nc (a retyped line) cannot bind the port and exits: one server stays.
        console.type(f"(nc -ll -p {ECHO_PORT} -e cat &) ; echo {marker}-$((6*7))\n")
        return f"{marker}-42" in console.output

    try:
        eventually(started, timeout=120, interval=1.0, what="nc listening in the guest")
    finally:
        assert console.leave() == 0, console.errors

    def address() -> str | None:
        return guest_address(get(api_client, guest_ns, "guest", vm=False) or {})

    found = eventually(address, timeout=120, what="the guest's address in its status")
    return guest_ns, found


def _networks(netns: str | None) -> list[ipaddress.IPv4Network]:
    """The IPv4 networks directly attached in a namespace (None: the test's own), read from its
    interfaces' addresses: no packet is sent."""
    command = ["ip", "-o", "-4", "addr", "show"]
    if netns is not None:
        command = ["ip", "netns", "exec", netns, *command]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return [ipaddress.ip_interface(line.split()[3]).network for line in out.splitlines()]


def _direct_round(lab: LabInfo, address: str, size: int) -> float:
    """Seconds for `size` bytes to the guest's echo and back on a connection made inside the
    lab's namespace, without the API server or the daemon."""
    probe = [sys.executable, "-m", "tests.support.port_echo", address, str(ECHO_PORT), str(size)]
    done = subprocess.run(
        ["ip", "netns", "exec", lab.netns, *probe],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
        cwd=REPO,
    )
    return float(done.stdout.strip())


def test_a_bound_user_reaches_the_guests_port_from_where_it_is_otherwise_unreachable(
    lab: LabInfo, api_client: client.ApiClient, echo_guest: tuple[str, str], tmp_kubeconfig: Path
) -> None:
    ns, address = echo_guest
    guest = ipaddress.ip_address(address)
    # The guest's network is attached in the lab's namespace and nowhere in the machine's own,
    # where this test and the plugin run (read from the interfaces: nothing is sent to it).
    assert any(guest in net for net in _networks(lab.netns)), address
    assert not any(guest in net for net in _networks(None) if net.prefixlen > 0), address

    user = user_kubeconfig(lab, api_client, tmp_kubeconfig, namespace=ns, name="forwarder")
    bind_portforward(api_client, ns, user)
    forward = eventually(
        lambda: PortForward(tmp_kubeconfig, ns, "guest", f":{ECHO_PORT}"),
        timeout=60,
        what="kubectl vm port-forward started",
    )
    try:
        line = f"hello-{uuid.uuid4().hex}\n".encode()

        def echoed() -> bytes:
            # The RoleBinding may need a moment to reach the authorizers: a refused stream
            # closes the local connection at once, and the next try gets through.
            with socket.create_connection(("127.0.0.1", forward.local), timeout=30) as sock:
                sock.sendall(line)
                got = b""
                while len(got) < len(line):
                    chunk = sock.recv(4096)
                    assert chunk, f"the stream closed ({forward.errors})"
                    got += chunk
                return got

        assert eventually(echoed, timeout=60, what="the guest's echo") == line
        # A client that shuts its writing side (as `nc -N` or an HTTP/1.0 client does) still
        # gets the whole answer, then the end of the stream once the guest closed.
        with socket.create_connection(("127.0.0.1", forward.local), timeout=30) as sock:
            sock.sendall(line)
            sock.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := sock.recv(4096):
                got += chunk
            assert got == line
        # Bytes both ways, many of them, each connection a stream of its own; and measured
        # against a direct connection in the lab's namespace.
        with socket.create_connection(("127.0.0.1", forward.local), timeout=30) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            forwarded = echo_round(sock, THROUGHPUT_BYTES)
        direct = _direct_round(lab, address, THROUGHPUT_BYTES)
        mib = THROUGHPUT_BYTES / (1 << 20)
        print(
            f"\nport-forward echo of {mib:.0f} MiB: through kubectl vm port-forward "
            f"{mib / forwarded:.2f} MiB/s ({forwarded:.2f} s), direct in the lab's namespace "
            f"{mib / direct:.2f} MiB/s ({direct:.2f} s), ratio {direct / forwarded:.2f} "
            f"(load average {os.getloadavg()[0]:.1f})"
        )
    finally:
        forward.stop()


def test_ssh_style_stdio_stream_carries_bytes_and_ends_with_stdin(
    lab: LabInfo, api_client: client.ApiClient, echo_guest: tuple[str, str], tmp_kubeconfig: Path
) -> None:
    """`port-forward --stdio`, what `kubectl vm ssh`'s ProxyCommand runs: stdin to the guest's
    port, its answer on stdout; the end of stdin ends the stream and the plugin exits 0."""
    ns, _address = echo_guest
    user = user_kubeconfig(lab, api_client, tmp_kubeconfig, namespace=ns, name="piper")
    bind_portforward(api_client, ns, user)
    line = f"stdio-{uuid.uuid4().hex}\n".encode()

    def through() -> tuple[int, bytes, str] | None:
        code, out, err = run_forward_stdio(tmp_kubeconfig, ns, "guest", ECHO_PORT, line)
        # The RoleBinding may need a moment to reach the authorizers; nothing else is retried.
        return None if code == 1 and "(Forbidden)" in err else (code, out, err)

    code, out, err = eventually(through, timeout=60, what="the RoleBinding honoured")
    # The end of stdin reaches the guest as the end of its input (the half-close): `cat` sends
    # the whole line back, then exits, and only the guest's closing ends the stream.
    assert (code, out) == (0, line), err


def test_a_user_without_the_rolebinding_is_forbidden(
    lab: LabInfo, api_client: client.ApiClient, echo_guest: tuple[str, str], tmp_kubeconfig: Path
) -> None:
    ns, _address = echo_guest
    user_kubeconfig(lab, api_client, tmp_kubeconfig, namespace=ns, name="outsider")
    code, out, err = run_forward_stdio(tmp_kubeconfig, ns, "guest", ECHO_PORT, b"x")
    assert code == 1
    assert out == b""
    assert "Error from server (Forbidden)" in err, err
    assert "libvirtmachines/portforward" in err, err


def test_a_port_nothing_listens_on_is_a_bad_gateway(
    lab: LabInfo, api_client: client.ApiClient, echo_guest: tuple[str, str], tmp_kubeconfig: Path
) -> None:
    ns, address = echo_guest
    user = user_kubeconfig(lab, api_client, tmp_kubeconfig, namespace=ns, name="knocker")
    bind_portforward(api_client, ns, user)

    def refused() -> str:
        code, _out, err = run_forward_stdio(tmp_kubeconfig, ns, "guest", CLOSED_PORT, b"x")
        assert code == 1, err
        assert "Forbidden" not in err, err  # the binding not seen yet: try again
        return err

    err = eventually(refused, timeout=60, what="the closed port's answer")
    assert "Error from server (BadGateway)" in err, err
    assert f"{address}:{CLOSED_PORT}" in err, err
    assert "refused" in err.lower(), err


def _admin_get(api_client: client.ApiClient, path: str) -> tuple[int, dict[str, Any]]:
    """A plain GET of `path` through the API server as the lab's admin: code and Status."""
    conf = api_client.configuration
    settings: dict[str, dict[str, Any]] = dict(conf.auth_settings())  # type: ignore[arg-type]
    headers = {
        s["key"]: s["value"] for s in settings.values() if s.get("in") == "header" and s["value"]
    }
    answer = api_client.call_api("GET", f"{conf.host}{path}", headers, _request_timeout=30)
    answer.read()
    return answer.status, json.loads(answer.data or b"{}")


def test_bad_ports_and_a_powered_off_machine_are_refused_clearly(
    lab: LabInfo, api_client: client.ApiClient, echo_guest: tuple[str, str]
) -> None:
    ns, _address = echo_guest
    base = (
        f"/apis/subresources.infrastructure.vm-api.io/v1alpha1/namespaces/{ns}"
        "/libvirtmachines/{name}/portforward/{port}"
    )
    for port in ("0", "65536", "ssh"):
        code, body = _admin_get(api_client, base.format(name="guest", port=port))
        assert code == 400, body
        assert "1 to 65535" in body["message"], body
    create(api_client, pair(ns, "dormant", vm_spec={"powerState": "PoweredOff"}))

    def defined() -> bool:
        status = (get(api_client, ns, "dormant", vm=False) or {}).get("status") or {}
        built = (status.get("providerMetadata") or {}).get("domainUUID")
        return bool(status.get("powerState") == "PoweredOff" and built)

    eventually(defined, timeout=120, what="LibvirtMachine dormant defined, PoweredOff")
    started = time.monotonic()
    code, body = _admin_get(api_client, base.format(name="dormant", port=ECHO_PORT))
    assert code == 409, body
    assert "is PoweredOff" in body["message"], body
    assert time.monotonic() - started < 30
