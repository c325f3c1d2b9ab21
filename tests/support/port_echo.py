"""Bytes through a TCP echo server and back, timed: port-forward's e2e test measures the stream
through `kubectl vm port-forward` against a direct connection made inside the lab's network
namespace (`ip netns exec NS python -m tests.support.port_echo ADDRESS PORT BYTES [MODE]`).
The console bench also times one direction at a time: `download` reads BYTES from a server that
sends zeros until the client leaves, `upload` sends BYTES to one that discards them, ends its
writing and waits for the server to close (all it sent was taken).

Standard library only, so it runs under `ip netns exec` without the test's fixtures.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

__all__ = ["ROUNDS", "download_round", "echo_round", "upload_round"]

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
    # Read in place: the client's own copying would otherwise weigh on the figure it measures.
    got = bytearray(size)
    view = memoryview(got)
    count = 0
    while count < size:
        read = sock.recv_into(view[count:], min(_CHUNK, size - count))
        if not read:
            break
        count += read
    took = time.monotonic() - started
    view.release()
    writer.join(timeout)
    assert not failure, failure
    assert count == size, f"{count} of {size} bytes came back"
    assert got == payload, "the bytes that came back differ"
    return took


def download_round(sock: socket.socket, size: int, *, timeout: float = 120.0) -> float:
    """Read `size` bytes of zeros; the seconds it took. AssertionError if fewer or not zeros."""
    sock.settimeout(timeout)
    buffer = bytearray(_CHUNK)
    got = 0
    stray = 0
    started = time.monotonic()
    while got < size:
        count = sock.recv_into(buffer, min(_CHUNK, size - got))
        if not count:
            break
        stray += count - buffer.count(0, 0, count)
        got += count
    took = time.monotonic() - started
    assert got == size, f"{got} of {size} bytes came"
    assert not stray, f"{stray} bytes were not zeros"
    return took


def upload_round(sock: socket.socket, size: int, *, timeout: float = 120.0) -> float:
    """Send `size` bytes, end the writing side and wait until the server closes; the seconds
    it took."""
    sock.settimeout(timeout)
    payload = memoryview(os.urandom(min(size, 1 << 20)))
    started = time.monotonic()
    left = size
    while left:
        left -= sock.send(payload[: min(left, len(payload))])
    sock.shutdown(socket.SHUT_WR)
    assert sock.recv(1) == b"", "the discarding server answered"
    return time.monotonic() - started


# Each kind of round by the name the command line and the console bench give it.
ROUNDS = {"echo": echo_round, "download": download_round, "upload": upload_round}


def main(argv: list[str]) -> int:
    address, port, size = argv[0], int(argv[1]), int(argv[2])
    round_ = ROUNDS[argv[3] if len(argv) > 3 else "echo"]
    with socket.create_connection((address, port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        print(f"{round_(sock, size):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
