"""A send out of the front of a stream's queue without copying it, for the loops that carry bulk
bytes (port-forward's, the plugin's).

Why a function of its own: sending a `memoryview` of the queue saves a copy per byte, but while
any view of a `bytearray` lives the bytearray cannot be resized, and a failed `SSLSocket.send`
keeps its argument alive in the exception's traceback. Releasing the views on the way out, raise
or not, lets the caller drop or trim the queue at once (a plain slice never had that problem).
"""

from __future__ import annotations

import socket

__all__ = ["send_front"]


def send_front(sock: socket.socket, queue: bytearray, length: int) -> int:
    """`sock.send` of the first `length` bytes of `queue`; the bytes sent."""
    with memoryview(queue) as view, view[:length] as front:
        return sock.send(front)
