"""The bytes of a hop between daemons (docs/console.md, "Routing"): the client's TLS connection
(the API server's aggregator) and the connection to the daemon serving the machine's host,
relayed both ways unchanged (the target's answer, then the WebSocket's frames or the GET's body).

One thread per hop, both sockets non-blocking in one `select`: an OpenSSL connection is not safe
for a read on one thread and a write on another, and a blocking write toward one end while the
other end waits for us to read would stall both (a paste into the console while the guest
answers). A write that could not finish is retried with the same first bytes, as OpenSSL wants.

Both ends are TLS sockets in the daemon; plain ones work the same (the unit tests use them).
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
import time

from libvirt_provider import constants as c

__all__ = ["HopRelay"]


class HopRelay:
    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self._client = client
        self._upstream = upstream
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self._stop: str | None = None
        self._lock = threading.Lock()
        # Bytes carried: from the client to the target, and back.
        self.forwarded = 0
        self.returned = 0

    def closed(self, reason: str) -> None:
        """End the relay from another thread (the daemon stopping)."""
        with self._lock:
            self._stop = reason
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def close(self) -> None:
        for sock in (self._wake_r, self._wake_w, self._upstream):
            with contextlib.suppress(OSError):
                sock.close()

    def run(self) -> str:
        """Relay until one end closes and what it sent is delivered; why it ended."""
        try:
            return self._loop()
        except OSError as err:
            return f"the hop's connection failed: {err}"

    def _loop(self) -> str:
        ends = (self._client, self._upstream)
        names = {self._client: "the client", self._upstream: "the target daemon"}
        other = {self._client: self._upstream, self._upstream: self._client}
        # Bytes waiting to be written to each end.
        waiting: dict[socket.socket, bytearray] = {end: bytearray() for end in ends}
        reading = {end: True for end in ends}
        ended: str | None = None
        flush_deadline = 0.0
        for end in ends:
            end.setblocking(False)
        while True:
            with self._lock:
                if self._stop is not None:
                    return self._stop
            if ended is not None and (
                not any(waiting.values()) or time.monotonic() > flush_deadline
            ):
                return ended
            readers = [
                end for end in ends if reading[end] and len(waiting[other[end]]) < c.HOP_BUFFER
            ]
            # Bytes OpenSSL already decrypted are invisible to select.
            buffered = [end for end in readers if isinstance(end, ssl.SSLSocket) and end.pending()]
            writers = [end for end in ends if waiting[end]]
            ready, writable, _ = select.select(
                [*readers, self._wake_r], writers, [], 0 if buffered else 1.0
            )
            if self._wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    self._wake_r.recv(64)
            for end in writable:
                with contextlib.suppress(ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    sent = end.send(bytes(waiting[end][: c.HOP_READ_CHUNK]))
                    del waiting[end][:sent]
            for end in [e for e in ends if e in buffered or e in ready]:
                try:
                    data = end.recv(c.HOP_READ_CHUNK)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    continue
                if not data:
                    reading[end] = False
                    if ended is None:
                        ended = f"{names[end]} closed the connection"
                        flush_deadline = time.monotonic() + c.CONSOLE_IO_TIMEOUT
                    continue
                waiting[other[end]] += data
                if end is self._client:
                    self.forwarded += len(data)
                else:
                    self.returned += len(data)
