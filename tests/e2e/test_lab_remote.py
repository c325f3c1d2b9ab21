"""The lab's remote libvirt host is reachable only over the network, and only with the right keys.

Issue 15's remote mode rests on this: from the client namespace, libvirt's own remote transports
(qemu+ssh with OpenSSH, qemu+libssh, qemu+tls) reach the host's libvirtd; a wrong key, a changed
host key, a certificate from another CA, a stopped sshd and a dead link each fail, with messages a
daemon can tell apart (asserted here by the phrases it would classify on); the API server answers
inside the client namespace; and the host has no way in but its link.

Every client runs inside the client namespace (`ip netns exec`), as the remote-mode daemon will.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest
from lxml import etree

from tests.support.lab_access import (
    LabInfo,
    LabRemote,
    remote_link,
    remote_rotate_host_key,
    remote_sshd_start,
    remote_sshd_stop,
)
from tests.support.virt import dhcp_lease, guest_domain_xml, overlay_volume_xml
from tests.support.waiting import eventually


@pytest.fixture
def remote(lab: LabInfo) -> LabRemote:
    assert lab.remote is not None, "these checks need the lab's remote host (VMAPI_LAB_REMOTE=1)"
    return lab.remote


@pytest.fixture
def sshd_restored(remote: LabRemote) -> Iterator[None]:
    """Whatever a test does to sshd, it listens again afterwards."""
    yield
    remote_sshd_start()


@pytest.fixture
def link_restored(remote: LabRemote) -> Iterator[None]:
    yield
    remote_link(up=True)


def in_client(
    remote: LabRemote, *cmd: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run a command inside the client namespace, with no terminal and no ssh agent."""
    return subprocess.run(
        ["ip", "netns", "exec", remote.client_netns, *cmd],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"},
    )


def virsh(remote: LabRemote, uri: str, commands: str) -> subprocess.CompletedProcess[str]:
    return in_client(remote, "virsh", "-q", "-c", uri, commands)


def reaches(remote: LabRemote, uri: str) -> bool:
    """The URI leads to the remote host's libvirtd, which lists its pool and network (an
    AssertionError otherwise, which `eventually` takes for "not yet")."""
    out = virsh(remote, uri, "pool-list --all --name; net-list --all --name; hostname")
    assert out.returncode == 0, out.stderr
    names = out.stdout.split()
    assert remote.pool in names, out.stdout
    assert remote.network in names, out.stdout
    assert names[-1] == remote.name, out.stdout
    return True


def refused(remote: LabRemote, uri: str, *phrases: str) -> str:
    """Connecting through `uri` fails with an error naming every one of `phrases`."""
    out = virsh(remote, uri, "hostname")
    assert out.returncode != 0, f"{uri} connected: {out.stdout}"
    for phrase in phrases:
        assert phrase in out.stderr, f"{phrase!r} not in {out.stderr!r}"
    return out.stderr


def test_ssh_with_the_authorized_key_and_known_host(remote: LabRemote) -> None:
    wrapper = remote.ssh_command.read_text()
    # The wrapper makes host-key checking strict and limited to the lab's file.
    for option in (
        f"UserKnownHostsFile={remote.known_hosts}",
        "GlobalKnownHostsFile=/dev/null",
        "StrictHostKeyChecking=yes",
        "BatchMode=yes",
        "-F none",
    ):
        assert option in wrapper, wrapper
    line = remote.known_hosts.read_text().split()
    assert line[:2] == [remote.address, "ssh-ed25519"], line
    reaches(remote, remote.ssh_uri_with())


def test_libssh_with_the_authorized_key_and_known_host(remote: LabRemote) -> None:
    reaches(remote, remote.libssh_uri_with())


def test_tls_with_a_client_certificate_of_the_lab_ca(remote: LabRemote) -> None:
    assert {remote.ca_crt, remote.tls_crt, remote.tls_key} == {
        remote.tls_pkipath / name for name in ("cacert.pem", "clientcert.pem", "clientkey.pem")
    }

    def verify(cert: Path) -> bool:
        return (
            subprocess.run(
                ["openssl", "verify", "-CAfile", str(remote.ca_crt), str(cert)],
                capture_output=True,
                check=False,
            ).returncode
            == 0
        )

    assert verify(remote.tls_crt)
    assert not verify(remote.wrong_tls_crt)
    reaches(remote, remote.tls_uri_with())


def test_tls_server_certificate_names_the_link_address(remote: LabRemote) -> None:
    # The server's certificate, as the host presents it (fetched from inside the client namespace).
    out = in_client(
        remote,
        "openssl",
        "s_client",
        "-connect",
        f"{remote.address}:16514",
        "-CAfile",
        str(remote.ca_crt),
        "-verify_return_error",
        "-verify_ip",
        remote.address,
        "-cert",
        str(remote.tls_crt),
        "-key",
        str(remote.tls_key),
        "-showcerts",
    )
    assert "Verify return code: 0 (ok)" in out.stdout, out.stdout + out.stderr
    pem = re.search(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", out.stdout, re.S)
    assert pem is not None
    san = subprocess.run(
        ["openssl", "x509", "-noout", "-ext", "subjectAltName"],
        input=pem.group(0),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"IP Address:{remote.address}" in san, san


def test_tls_refuses_a_certificate_from_another_ca(remote: LabRemote, tmp_path: Path) -> None:
    # libvirt's client checks its own certificate against the CA it was given and stops there.
    refused(
        remote,
        remote.tls_uri_with(pkipath=remote.wrong_tls_pkipath),
        "Our own certificate",
        "failed validation against",
    )
    # Past that check (no_sanity=1) the host itself refuses the handshake.
    refused(
        remote,
        remote.tls_uri_with(pkipath=remote.wrong_tls_pkipath) + "&no_sanity=1",
        "Unable to read TLS confirmation",
    )
    # And with the wrong CA as the only trust anchor, the host's own certificate is refused.
    wrong_ca = tmp_path / "pki"
    wrong_ca.mkdir()
    shutil.copyfile(remote.wrong_tls_crt, wrong_ca / "clientcert.pem")
    shutil.copyfile(remote.wrong_tls_key, wrong_ca / "clientkey.pem")
    other_ca = remote.wrong_tls_crt.parent.parent / "other-ca.crt"
    shutil.copyfile(other_ca, wrong_ca / "cacert.pem")
    refused(remote, remote.tls_uri_with(pkipath=wrong_ca), "Failed to verify peer's certificate")


def test_a_key_that_is_not_authorized_is_refused(remote: LabRemote) -> None:
    assert remote.wrong_ssh_key.read_text() != remote.ssh_key.read_text()
    refused(remote, remote.ssh_uri_with(key=remote.wrong_ssh_key), "Permission denied (publickey)")
    refused(
        remote,
        remote.libssh_uri_with(key=remote.wrong_ssh_key),
        "failed to authenticate",
        "Access denied for 'publickey'",
    )


def test_a_rotated_host_key_fails_verification(
    remote: LabRemote, sshd_restored: None, tmp_path: Path
) -> None:
    old = tmp_path / "known_hosts.old"
    shutil.copyfile(remote.known_hosts, old)
    old_wrapper = tmp_path / "ssh"
    old_wrapper.write_text(
        remote.ssh_command.read_text().replace(str(remote.known_hosts), str(old))
    )
    old_wrapper.chmod(0o755)
    # Before the rotation the copy works like the original.
    reaches(remote, remote.ssh_uri_with(command=old_wrapper))

    new_line = remote_rotate_host_key()
    assert new_line == remote.known_hosts.read_text().strip()
    assert new_line != old.read_text().strip()

    refused(
        remote,
        remote.ssh_uri_with(command=old_wrapper),
        "REMOTE HOST IDENTIFICATION HAS CHANGED",
        "Host key verification failed",
    )
    refused(
        remote,
        remote.libssh_uri_with(known_hosts=old),
        "SSH HOST KEY VERIFICATION FAILED",
        "differs from stored identity",
    )
    # The lab's known_hosts now holds the new key: both transports work with it.
    reaches(remote, remote.ssh_uri_with())
    reaches(remote, remote.libssh_uri_with())


def test_an_unknown_host_is_refused(remote: LabRemote, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    wrapper = tmp_path / "ssh"
    wrapper.write_text(remote.ssh_command.read_text().replace(str(remote.known_hosts), str(empty)))
    wrapper.chmod(0o755)
    refused(remote, remote.ssh_uri_with(command=wrapper), "Host key verification failed")
    # libssh asks its caller about an unknown key; virsh without a terminal declines.
    refused(remote, remote.libssh_uri_with(known_hosts=empty), "was not accepted")
    assert empty.read_text() == "", "an unknown host key must not be recorded"


def test_stopping_sshd_breaks_ssh_and_starting_it_restores(
    remote: LabRemote, sshd_restored: None
) -> None:
    remote_sshd_stop()
    eventually(
        lambda: refused(remote, remote.ssh_uri_with(), "port 22: Connection refused"),
        timeout=30,
        what="qemu+ssh refused while sshd is down",
    )
    refused(remote, remote.libssh_uri_with(), f"'{remote.address}:22': Connection refused")
    # libvirtd itself is up: TLS still works.
    reaches(remote, remote.tls_uri_with())
    remote_sshd_start()
    # The same host key as before: the lab's known_hosts still holds.
    eventually(
        lambda: reaches(remote, remote.ssh_uri_with()),
        timeout=30,
        what="qemu+ssh back after sshd started",
    )
    reaches(remote, remote.libssh_uri_with())


def test_a_dead_link_makes_the_host_unreachable(remote: LabRemote, link_restored: None) -> None:
    remote_link(up=False)
    refused(remote, remote.ssh_uri_with(), "port 22: No route to host")
    refused(remote, remote.libssh_uri_with(), f"'{remote.address}:22': No route to host")
    refused(remote, remote.tls_uri_with(), f"'{remote.address}:16514': No route to host")
    remote_link(up=True)
    eventually(
        lambda: reaches(remote, remote.tls_uri_with()),
        timeout=30,
        what="the host reachable again over its link",
    )


def test_the_api_server_answers_inside_the_client_namespace(
    lab: LabInfo, remote: LabRemote
) -> None:
    kubectl = lab.dir / "bin" / "kubectl"
    out = in_client(remote, str(kubectl), "--kubeconfig", lab.kubeconfig, "get", "--raw", "/readyz")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    out = in_client(remote, str(kubectl), "--kubeconfig", lab.kubeconfig, "get", "ns", "default")
    assert out.returncode == 0, out.stderr
    # Only the API server is carried over: the namespace's loopback is its own.
    api_port = _server_port(Path(lab.kubeconfig))
    probe = (
        "import socket,sys\n"
        "for port in map(int, sys.argv[1:]):\n"
        "    s = socket.socket(); s.settimeout(5)\n"
        "    print(port, s.connect_ex(('127.0.0.1', port)))\n"
    )
    out = in_client(remote, "python3", "-c", probe, str(api_port), str(api_port + 1))
    results = dict(line.split() for line in out.stdout.splitlines())
    assert results[str(api_port)] == "0", out.stdout + out.stderr
    assert results[str(api_port + 1)] != "0", out.stdout


def _server_port(kubeconfig: Path) -> int:
    found = re.search(r"server:\s*https://127\.0\.0\.1:(\d+)", kubeconfig.read_text())
    assert found is not None
    return int(found.group(1))


@contextlib.contextmanager
def _connect(uri: str) -> Iterator[libvirt.virConnect]:
    conn = libvirt.open(uri)
    try:
        yield conn
    finally:
        conn.close()


def _links(netns: str | None) -> dict[str, list[str]]:
    """Interface name to its IPv4 addresses (with prefix) in `netns` (None: the machine's own)."""
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    out = subprocess.run(
        [*prefix, "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    names = subprocess.run(
        [*prefix, "-o", "link", "show"], capture_output=True, text=True, check=True
    ).stdout
    links: dict[str, list[str]] = {
        line.split(":")[1].strip().split("@")[0]: [] for line in names.splitlines()
    }
    for line in out.splitlines():
        fields = line.split()
        links[fields[1]].append(fields[3])
    return links


def _routes(netns: str | None) -> list[str]:
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    out = subprocess.run(
        [*prefix, "-4", "route", "show", "table", "all"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if not line.startswith(("local ", "broadcast "))]


def test_the_host_has_no_way_in_but_its_link(remote: LabRemote) -> None:
    with _connect(remote.uri) as conn:
        assert conn.getHostname() == remote.name
        bridges = {
            str(etree.fromstring(n.XMLDesc(0)).find("bridge").get("name"))  # type: ignore[union-attr]
            for n in conn.listAllNetworks()
        }
        taps = {
            str(t.get("dev"))
            for d in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
            for t in etree.fromstring(d.XMLDesc(0)).iterfind("devices/interface/target")
        }
    host = _links(remote.netns)
    client = _links(remote.client_netns)
    # The host: loopback, its end of the link, and libvirt's own isolated bridges and guest taps.
    link = {name for name, addrs in host.items() if f"{remote.address}/30" in addrs}
    assert len(link) == 1, host
    assert set(host) - bridges - taps == {"lo", *link}, host
    # The client: loopback and its end of the link only.
    client_link = {n for n, addrs in client.items() if f"{remote.client_address}/30" in addrs}
    assert len(client_link) == 1, client
    assert set(client) == {"lo", *client_link}, client
    # No default route on either side: the link's /30 and the bridges' subnets are all there is.
    for netns in (remote.netns, remote.client_netns):
        routes = _routes(netns)
        assert not [r for r in routes if r.startswith("default")], (netns, routes)
        assert all("scope link" in r for r in routes), (netns, routes)
    # The machine's own namespace has no part of it.
    own = _links(None)
    assert not set(own) & (set(host) - {"lo"}), own
    assert not set(own) & (set(client) - {"lo"}), own
    own_addrs = {a.split("/")[0] for addrs in own.values() for a in addrs}
    assert not own_addrs & {remote.address, remote.client_address}, own_addrs
    link_net = remote.address.rsplit(".", 1)[0]
    assert not [r for r in _routes(None) if r.startswith(link_net)], _routes(None)
    # And nothing listens on the host beyond sshd and libvirtd's TLS port on the link address,
    # and libvirt's dnsmasq on its bridges.
    listening = subprocess.run(
        ["ip", "netns", "exec", remote.netns, "ss", "-Hltnp"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    on_link = sorted(
        line.split()[3] for line in listening.splitlines() if remote.address in line.split()[3]
    )
    assert on_link == [f"{remote.address}:16514", f"{remote.address}:22"], listening


def test_a_guest_boots_on_the_remote_host(lab: LabInfo, remote: LabRemote) -> None:
    name = "remotesmoke-" + uuid.uuid4().hex[:8]
    with _connect(remote.uri) as conn:
        pool = conn.storagePoolLookupByName(remote.pool)
        base = pool.storageVolLookupByName(lab.guest_volume)
        vol = pool.createXML(overlay_volume_xml(f"{name}.qcow2", base.path()), 0)
        dom = conn.defineXML(
            guest_domain_xml(lab, name=name, dom_uuid=str(uuid.uuid4()), disk=vol.path())
        )
        try:
            dom.create()
            # Seen over TLS from the client namespace too.
            out = virsh(remote, remote.tls_uri_with(), "list --name")
            assert name in out.stdout.split(), out.stdout + out.stderr
            address = eventually(
                lambda: dhcp_lease(dom), timeout=180, interval=0.5, what="a DHCP lease on r0"
            )
            bridge = etree.fromstring(conn.networkLookupByName(remote.network).XMLDesc(0))
            bridge_ip = str(bridge.find("ip").get("address"))  # type: ignore[union-attr]
            assert address.rsplit(".", 1)[0] == bridge_ip.rsplit(".", 1)[0], (address, bridge_ip)
        finally:
            if dom.isActive():
                dom.destroy()
            dom.undefine()
            vol.delete(0)
