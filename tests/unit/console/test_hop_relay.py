"""The hop's relay (`process/hop_relay.py`) over real socket pairs: big transfers both ways at
once do not stall, what one end sent before closing reaches the other, and stopping the daemon
ends a relay at once. TLS is not in the way here: the relay takes a plain socket as it takes a
TLS one (the e2e test, tests/e2e/console/test_hop.py, runs it between two daemons' TLS)."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from collections.abc import Iterator

import pytest

from libvirt_provider.adapters.process.hop_relay import HopRelay

_DEADLINE = 30.0


class _Relay:
    """A relay between two socket pairs on its own thread: `client` and `target` are the far
    ends (the aggregator's side and the target daemon's)."""

    def __init__(self) -> None:
        self.client, near_client = socket.socketpair()
        self.target, near_target = socket.socketpair()
        self.relay = HopRelay(near_client, near_target)
        self._near = (near_client, near_target)
        self.why: str | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.why = self.relay.run()

    def join(self) -> str:
        self._thread.join(_DEADLINE)
        assert not self._thread.is_alive(), "the relay did not end"
        assert self.why is not None
        return self.why

    def close(self) -> None:
        self.relay.close()
        for sock in (self.client, self.target, *self._near):
            sock.close()


@pytest.fixture
def relay() -> Iterator[_Relay]:
    made = _Relay()
    try:
        yield made
    finally:
        made.close()


def _send_then_read(sock: socket.socket, data: bytes, expect: int) -> tuple[bytes, list[str]]:
    """Write all of `data` on a thread while reading `expect` bytes here."""
    errors: list[str] = []

    def write() -> None:
        try:
            sock.sendall(data)
        except OSError as err:
            errors.append(str(err))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    got = bytearray()
    sock.settimeout(_DEADLINE)
    while len(got) < expect:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        got += chunk
    writer.join(_DEADLINE)
    return bytes(got), errors


def test_eight_mib_each_way_at_once_do_not_stall(relay: _Relay) -> None:
    size = 8 << 20
    up, down = os.urandom(size), os.urandom(size)
    results: dict[str, tuple[bytes, list[str]]] = {}

    def side(name: str, sock: socket.socket, data: bytes) -> None:
        results[name] = _send_then_read(sock, data, size)

    threads = [
        threading.Thread(target=side, args=("client", relay.client, up)),
        threading.Thread(target=side, args=("target", relay.target, down)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(_DEADLINE * 2)
    got_by_target, errors_t = results["target"]
    got_by_client, errors_c = results["client"]
    assert not errors_t
    assert not errors_c
    assert hashlib.sha256(got_by_target).digest() == hashlib.sha256(up).digest()
    assert hashlib.sha256(got_by_client).digest() == hashlib.sha256(down).digest()
    assert relay.relay.forwarded == size
    assert relay.relay.returned == size


def test_what_the_target_sent_before_closing_reaches_the_client(relay: _Relay) -> None:
    answer = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 3\r\n\r\nno!" * 1000
    relay.target.sendall(answer)
    relay.target.close()
    got = bytearray()
    relay.client.settimeout(_DEADLINE)
    while len(got) < len(answer) and (chunk := relay.client.recv(1 << 16)):
        got += chunk
    assert bytes(got) == answer
    # The daemon closes the client's connection once the relay returned.
    assert relay.join() == "the target daemon closed the connection"


def test_the_client_leaving_ends_the_relay_and_the_target_sees_it(relay: _Relay) -> None:
    relay.client.sendall(b"\x88\x02\x03\xe8")
    relay.client.close()
    assert relay.join() == "the client closed the connection"
    relay.target.settimeout(_DEADLINE)
    assert relay.target.recv(16) == b"\x88\x02\x03\xe8"


def test_stopping_the_daemon_ends_a_quiet_relay_at_once(relay: _Relay) -> None:
    relay.relay.closed("the daemon is stopping")
    assert relay.join() == "the daemon is stopping"
