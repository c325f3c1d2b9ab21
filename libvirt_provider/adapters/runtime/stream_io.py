"""The reads and writes the two stream loops share, the plugin's (`plugin/pump.py`) and the
daemon's port-forward (`process/port_forward.py`): both carry bulk bytes on non-blocking sockets,
TLS or plain, one thread per stream.

- `read_ready`: all a socket has ready, up to a limit, not one read per wake-up (a TLS read
  returns one 16 KiB record, and the loop's cost per wake-up was most of what a stream cost).
- `Outbox`: bytes waiting for a socket, sent as it takes them, out of a view of the queue rather
  than a copy; a TLS send that could not finish is offered the same bytes again, as OpenSSL
  requires. The views are released even when a send fails (a failed `SSLSocket.send` keeps its
  argument alive in the exception's traceback), so the queue can be dropped at once.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass, field

__all__ = ["Outbox", "Reading", "read_ready"]

# What a non-blocking socket, TLS or plain, raises when it cannot go on now.
_WOULD_BLOCK = (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError)


@dataclass
class Reading:
    """What one `read_ready` got: the pieces as read; `ended` when the peer closed before any
    piece (after some, the end is seen on the next call); `failure` when the socket failed, with
    or without pieces before it (the caller says which it delivers)."""

    pieces: list[bytes] = field(default_factory=list)
    ended: bool = False
    failure: OSError | None = None


def read_ready(sock: socket.socket, *, chunk: int, limit: int) -> Reading:
    """Read `chunk` at a time from non-blocking `sock` while it has more ready, up to `limit`."""
    reading = Reading()
    got = 0
    while got < limit:
        try:
            piece = sock.recv(chunk)
        except _WOULD_BLOCK:
            break
        except OSError as err:
            reading.failure = err
            break
        if not piece:
            reading.ended = not reading.pieces
            break
        reading.pieces.append(piece)
        got += len(piece)
    return reading


class Outbox:
    """Bytes for a non-blocking socket, sent `attempt` bytes at a time as it takes them."""

    def __init__(self, attempt: int) -> None:
        self.data = bytearray()
        self._most = attempt
        # The length of a TLS send that did not finish: OpenSSL wants exactly those bytes again.
        self._attempt = 0

    def __len__(self) -> int:
        return len(self.data)

    def add(self, data: bytes | bytearray) -> None:
        self.data += data

    def clear(self) -> None:
        self.data.clear()
        self._attempt = 0

    def flush(self, sock: socket.socket) -> None:
        """Send what the socket takes now; OSError when it failed."""
        while self.data:
            if not self._attempt:
                self._attempt = min(len(self.data), self._most)
            try:
                with memoryview(self.data) as view, view[: self._attempt] as front:
                    sent = sock.send(front)
            except _WOULD_BLOCK:
                return
            del self.data[:sent]
            self._attempt = 0
