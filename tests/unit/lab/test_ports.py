"""The lab waits for a stopped API server's ports to be released before it starts another.

Why: a killed process can look gone (its main thread a zombie) while its other threads still hold
its listening sockets; an API server spawned then failed to bind etcd's peer port and exited.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.lab.lab import LabError, port_free, wait_ports_free


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_port_something_listens_on_is_not_free(listener: int) -> None:
    assert not port_free(listener)


def test_a_closed_listeners_port_is_free_again() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = int(sock.getsockname()[1])
        # A connection left in TIME_WAIT must not count as the port being held.
        with socket.create_connection(("127.0.0.1", port)) as peer:
            accepted, _ = sock.accept()
            accepted.close()
            peer.recv(1)
    assert port_free(port)
    wait_ports_free([port], what="test", timeout=1)


def test_waiting_on_a_held_port_ends_with_an_error_naming_it(listener: int) -> None:
    with pytest.raises(LabError, match=f"ports \\[{listener}\\] still in use"):
        wait_ports_free([listener], what="starting kube-apiserver", timeout=0.3)
