"""The VNC half of the aggregated API endpoint: a session's bridge between the client's WebSocket
and the guest's display socket, and the screenshot's answer (docs/console.md, "VNC and
screenshots").

`ConsoleServer` authenticates and authorises a request exactly as a console's (the review asks
for `get` on `libvirtmachines/vnc`), finds the machine, and hands over here: the display's socket
comes from libvirt (`driver/libvirt_graphics.py`), so no VNC port is ever open on the host's
network. The stream is RFB as qemu speaks it, carried unchanged in binary frames; qemu's own VNC
server, not the daemon, parses it.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import time
from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.adapters.runtime.websocket_mask import fast_mask
from libvirt_provider.console.framing import (
    CloseCode,
    FrameReader,
    Opcode,
    ProtocolError,
    close_payload,
    encode_frame,
)

__all__ = ["VncBridge", "answer_png", "choose_subprotocol"]


def choose_subprotocol(offered: list[str]) -> str | None:
    """The subprotocol to answer among those the client offered (lower-cased), or None."""
    return next((p for p in c.VNC_SUBPROTOCOLS if p in offered), None)


def answer_png(conn: ssl.SSLSocket, png: bytes) -> None:
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n"
        f"Content-Length: {len(png)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        conn.sendall(head.encode("ascii") + png)


class VncBridge:
    """One VNC session on its connection's thread: the client's socket, the display's socket
    and a wake-up pipe (the daemon stopping) in one `select`; pings when idle, as the console's.
    Writes block (bounded by `CONSOLE_IO_TIMEOUT`), so a slow side slows the other instead of
    filling memory."""

    def __init__(self, conn: ssl.SSLSocket, display: socket.socket) -> None:
        self._conn = conn
        self._display = display
        display.settimeout(c.CONSOLE_IO_TIMEOUT)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self._reason = "the daemon ended the session"

    def closed(self, reason: str) -> None:
        """End the session from another thread (the daemon is stopping)."""
        self._reason = reason
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"\0")

    def run(self) -> str:
        """Bridge until the session ends; why it ended."""
        try:
            return self._loop()
        except OSError as err:
            return f"a connection failed: {err}"

    def close(self) -> None:
        for sock in (self._display, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                sock.close()

    def _send(self, opcode: Opcode, payload: bytes) -> None:
        self._conn.sendall(encode_frame(opcode, payload))

    def _goodbye(self, code: CloseCode, why: str) -> str:
        with contextlib.suppress(OSError):
            self._send(Opcode.CLOSE, close_payload(code, why))
        return why

    def _loop(self) -> str:
        reader = FrameReader(max_payload=c.CONSOLE_MAX_FRAME, unmask=fast_mask)
        heard = time.monotonic()
        pinged = heard
        while True:
            now = time.monotonic()
            if now - heard > c.CONSOLE_PING_SECONDS * c.CONSOLE_SILENT_PINGS:
                return self._goodbye(CloseCode.GOING_AWAY, "the client stopped answering")
            if now - pinged >= c.CONSOLE_PING_SECONDS:
                self._send(Opcode.PING, b"vmapi")
                pinged = now
            wait = max(0.0, pinged + c.CONSOLE_PING_SECONDS - now)
            ready: list[Any]
            if self._conn.pending():
                ready = [self._conn]
            else:
                ready, _, _ = select.select([self._conn, self._display, self._wake_r], [], [], wait)
            if self._wake_r in ready:
                return self._goodbye(CloseCode.GOING_AWAY, self._reason)
            if self._display in ready:
                data = self._display.recv(c.VNC_READ_CHUNK)
                if not data:
                    return self._goodbye(CloseCode.GOING_AWAY, "the guest's display closed")
                self._send(Opcode.BINARY, data)
            if self._conn in ready:
                try:
                    data = self._conn.recv(c.VNC_READ_CHUNK)
                except ssl.SSLWantReadError:
                    continue
                if not data:
                    return "the client disconnected"
                heard = time.monotonic()
                try:
                    frames = reader.feed(data)
                except ProtocolError as err:
                    return self._goodbye(err.code, f"protocol error: {err}")
                for frame in frames:
                    if frame.opcode in (Opcode.BINARY, Opcode.TEXT, Opcode.CONTINUATION):
                        self._display.sendall(frame.payload)
                    elif frame.opcode == Opcode.PING:
                        self._send(Opcode.PONG, frame.payload)
                    elif frame.opcode == Opcode.CLOSE:
                        self._goodbye(CloseCode.NORMAL, "")
                        return "the client closed the session"
