"""Connection attempts to remote hosts: one in flight per endpoint, and an abandoned one leaves
nothing behind.

The rules run with injected openers (no socket at all); the leak is measured against libvirt's
real TLS client and a listener on 127.0.0.1 that accepts and never answers
(`tests/support/black_hole.py`), which needs no lab: only libvirt-python and openssl. The
deadline there is short so that 100 attempts take a few seconds; the cut that ends an
abandoned attempt does not depend on it.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest

from libvirt_provider import constants as c
from libvirt_provider.driver.connect_attempts import (
    AttemptGate,
    BusyError,
    _Attempt,
    _socket_inodes,
    attempt_key,
    in_flight,
    open_with_deadline,
    tcp_peer,
)
from libvirt_provider.driver.endpoint import ConnectionProblemError
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor
from libvirt_provider.errors import HostUnreachableError
from tests.support.black_hole import BlackHole, process_figures, tls_client_pki
from tests.support.waiting import eventually

ATTEMPTS = 100
DEADLINE = 0.02


# -- the pure parts -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "peer"),
    [
        ("qemu+tls://kvm1.example/system?pkipath=/d", ("kvm1.example", 16514)),
        ("qemu+tls://KVM1.example:1234/system", ("kvm1.example", 1234)),
        ("qemu+tls://[fd00::7]/system", ("fd00::7", 16514)),
        ("qemu+libssh://root@10.0.0.7/system?keyfile=/k", ("10.0.0.7", 22)),
        ("qemu+libssh://root@10.0.0.7:2222/system", ("10.0.0.7", 2222)),
        ("qemu+ssh://root@10.0.0.7/system", None),  # a pipe to the OpenSSH client
        ("qemu:///system", None),
        ("test:///default", None),
    ],
)
def test_the_tcp_peer_of_a_uri(uri: str, peer: tuple[str, int] | None) -> None:
    assert tcp_peer(uri) == peer


def test_uris_that_reach_the_same_endpoint_share_one_key() -> None:
    assert attempt_key("qemu+tls://kvm1/system?pkipath=/a") == attempt_key(
        "qemu+tls://KVM1:16514/system?pkipath=/b"
    )
    assert attempt_key("qemu+ssh://a@kvm1/system") != attempt_key("qemu+ssh://a@kvm2/system")


def test_the_gate_lets_one_attempt_per_key_in_flight() -> None:
    now = [100.0]
    gate = AttemptGate(clock=lambda: now[0])
    gate.begin("kvm1")
    gate.begin("kvm2")  # another host is not held up
    now[0] += 12
    with pytest.raises(BusyError) as busy:
        gate.begin("kvm1")
    assert busy.value.age == 12
    gate.end("kvm1")
    gate.begin("kvm1")
    assert gate.busy("kvm1")


# -- one attempt in flight, with injected openers ----------------------------------------------


class Opener:
    """Opens "connections" (strings) when released; counts calls and closes."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0
        self.closed: list[str] = []

    def __call__(self, uri: str) -> str:
        self.calls += 1
        self.release.wait(30)
        return f"connection {self.calls}"

    def close(self, conn: str) -> None:
        self.closed.append(conn)


@pytest.fixture
def opener() -> Iterator[Opener]:
    opener = Opener()
    yield opener
    opener.release.set()


def test_an_attempt_while_one_is_stuck_is_refused_not_started(opener: Opener) -> None:
    uri = "qemu+ssh://root@stuck-host/system"
    with pytest.raises(ConnectionProblemError) as timed_out:
        open_with_deadline(uri, 0.05, opener=opener, close=opener.close)
    assert timed_out.value.reason == c.REASON_UNREACHABLE
    assert "no answer within 0.05 s" in timed_out.value.message
    for _ in range(5):
        with pytest.raises(ConnectionProblemError) as busy:
            open_with_deadline(uri, 0.05, opener=opener, close=opener.close)
        assert busy.value.reason == c.REASON_UNREACHABLE
        assert "has not ended" in busy.value.message
    assert opener.calls == 1
    assert in_flight(uri)
    # The stuck attempt finally returns: what it opened is closed, and the gate opens again.
    opener.release.set()
    eventually(lambda: not in_flight(uri), timeout=10, what="the attempt ended")
    assert opener.closed == ["connection 1"]
    assert open_with_deadline(uri, 5, opener=opener, close=opener.close) == "connection 2"
    assert opener.closed == ["connection 1"]


def test_a_stuck_attempt_holds_up_only_its_own_endpoint(opener: Opener) -> None:
    with pytest.raises(ConnectionProblemError):
        open_with_deadline("qemu+ssh://root@host-a/system", 0.05, opener=opener, close=str)

    def answers(uri: str) -> str:
        return "other"

    assert open_with_deadline("qemu+ssh://root@host-b/system", 5, opener=answers, close=str) == (
        "other"
    )


def test_an_error_of_the_opener_is_raised_as_it_is_and_frees_the_endpoint() -> None:
    uri = "qemu+ssh://root@refusing-host/system"

    def refuses(_: str) -> str:
        raise libvirt.libvirtError("Connection refused")

    for _ in range(3):
        with pytest.raises(libvirt.libvirtError):
            open_with_deadline(uri, 5, opener=refuses, close=str)
    assert not in_flight(uri)


# -- the black hole: libvirt's TLS client against a listener that never answers ----------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    made = tls_client_pki(tmp_path_factory.mktemp("pki"))
    # tests/lab/install-deps.sh installs openssl (the lab's TLS host needs it too): its absence
    # is a broken set-up, not a reason to skip.
    assert made is not None, "no openssl command to make the client's certificates"
    return made


def _no_sweeper() -> bool:
    return not any(t.name == "libvirt-connect-sweeper" for t in threading.enumerate())


def test_attempts_against_a_black_hole_leave_no_thread_or_socket_behind(pki: Path) -> None:
    opened: list[str] = []

    def counting_open(uri: str) -> libvirt.virConnect:
        opened.append(uri)
        return libvirt.open(uri)

    def attempt(uri: str) -> None:
        eventually(
            lambda: not in_flight(uri), timeout=30, interval=0.01, what="the previous attempt ended"
        )
        with pytest.raises(ConnectionProblemError) as failed:
            open_with_deadline(uri, DEADLINE, opener=counting_open, close=lambda conn: conn.close())
        assert failed.value.reason == c.REASON_UNREACHABLE

    with BlackHole() as hole:
        uri = f"qemu+tls://127.0.0.1:{hole.port}/system?pkipath={pki}"
        attempt(uri)  # libvirt's and GnuTLS's one-time set-up, outside the figures
        eventually(lambda: not in_flight(uri), timeout=30, what="the first attempt ended")
        eventually(lambda: hole.open_connections() == 0, timeout=30, what="its socket closed")
        eventually(_no_sweeper, timeout=30, what="the sweeper thread gone")
        baseline = process_figures()
        peak = baseline
        for _ in range(ATTEMPTS):
            attempt(uri)
            peak = max(peak, process_figures())
        eventually(
            lambda: hole.accepted == ATTEMPTS + 1,
            timeout=30,
            what="every attempt reached the listener",
        )
        after = eventually(
            lambda: (figures := process_figures()) <= baseline and figures,
            timeout=30,
            what=f"threads and descriptors back to {baseline}",
        )
        eventually(lambda: hole.open_connections() == 0, timeout=30, what="no socket left open")
    assert len(opened) == ATTEMPTS + 1
    # One attempt's thread (and the sweeper's) at a time, never one per attempt.
    assert peak[0] <= baseline[0] + 3, (baseline, peak, after)


def test_a_remote_host_behind_a_black_hole_is_unreachable_and_attempts_end(pki: Path) -> None:
    with BlackHole() as hole:
        uri = f"qemu+tls://127.0.0.1:{hole.port}/system?pkipath={pki}"
        hypervisor = LibvirtHypervisor(lambda: uri, host="black-hole", connect_timeout=DEADLINE)
        with pytest.raises(HostUnreachableError) as unreachable:
            hypervisor.host_facts()
        assert unreachable.value.reason == c.REASON_UNREACHABLE
        eventually(lambda: not in_flight(uri), timeout=30, what="the attempt ended")
        eventually(lambda: hole.open_connections() == 0, timeout=30, what="its socket closed")
        hypervisor.close()


def test_a_finished_attempt_never_cuts_the_next_attempts_connection() -> None:
    """The sweeper may still hold an attempt whose thread is ending when the gate has already let
    the endpoint's next attempt connect: cutting then would shut down the new connection (its
    open failed as a TLS error, not as Unreachable). Once finished, an attempt cuts nothing."""
    with BlackHole() as hole:
        before = _socket_inodes()
        with socket.create_connection(("127.0.0.1", hole.port)) as following:
            eventually(lambda: hole.open_connections() == 1, timeout=10, what="accepted")
            old: _Attempt[object] = _Attempt(
                key=("127.0.0.1", hole.port),
                peer=("127.0.0.1", hole.port),
                sockets_before=before,
                close=lambda _conn: None,
                addresses=frozenset({"127.0.0.1"}),
                finished=True,
            )
            assert old.cut() == 0
            following.sendall(b"still open")
            old.finished = False  # the same attempt still running would cut it
            assert old.cut() == 1
