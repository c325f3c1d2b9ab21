"""Bytes through a TCP echo server and back, timed: port-forward's e2e test measures the stream
through `kubectl vm port-forward` against a direct connection made inside the lab's network
namespace (`ip netns exec NS python -m tests.support.port_echo ADDRESS PORT BYTES`).

Standard library only, so it runs under `ip netns exec` without the test's fixtures.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

__all__ = ["echo_round"]

_CHUNK = 64 * 1024


def echo_round(sock: socket.socket, size: int, *, timeout: float = 120.0) -> float:
    """Send `size` random bytes and read them back (a writer thread, so neither side's buffer
    fills and stalls the other); the seconds it took. AssertionError if they differ."""
    payload = os.urandom(size)
    sock.settimeout(timeout)
    failure: list[BaseException] = []

    def write() -> None:
        try:
            view = memoryview(payload)
            for start in range(0, size, _CHUNK):
                sock.sendall(view[start : start + _CHUNK])
        except OSError as err:
            failure.append(err)

    started = time.monotonic()
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    got = bytearray()
    while len(got) < size:
        chunk = sock.recv(_CHUNK)
        if not chunk:
            break
        got += chunk
    took = time.monotonic() - started
    writer.join(timeout)
    assert not failure, failure
    assert len(got) == size, f"{len(got)} of {size} bytes came back"
    assert bytes(got) == payload, "the bytes that came back differ"
    return took


def main(argv: list[str]) -> int:
    address, port, size = argv[0], int(argv[1]), int(argv[2])
    with socket.create_connection((address, port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        print(f"{echo_round(sock, size):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
