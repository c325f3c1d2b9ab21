"""One forwarded TCP stream: the WebSocket the API server holds open, bridged to a guest's port.

The console endpoint (`console_server.py`) authenticates and authorises the request, finds the
guest (`console/portforward.py`), dials it (`guest_dial.py`) and only then upgrades, so a port that
refuses or does not answer is an HTTP error (502) rather than a stream that closes at once. Then
this loop, on the connection's thread: the TLS socket, the guest's socket and a wake-up pipe in one
`select`; the guest's bytes go out in binary frames, the client's binary (or text) frames go to the
guest, pings as on the console. WebSocket has no half-close of its own; in the port-forward
subprotocol (`PORTFORWARD_SUBPROTOCOL`) an empty binary frame from the client stands for one: what
the client sent is written to the guest, the guest connection's writing side is shut (the guest
reads its end of input, as over TCP), and the guest's answer keeps flowing until the guest closes,
which sends the close frame after the last bytes. Without it (the console's subprotocol, spoken by
plugins of an earlier release) the client's close ends the stream at once, and an answer still
on its way is lost.

Backpressure: bytes for the guest wait in a buffer written as the guest's socket takes them, so a
guest slow to read never stops its own output from being sent (an echo would otherwise stall on
itself); past `PORTFORWARD_BUFFER` bytes nothing more is read from the client until it drains.
Toward the client, a write blocks (bounded by `CONSOLE_IO_TIMEOUT`) and nothing is read from the
guest meanwhile. Memory stays a buffer and a frame's worth per stream.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import time
from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.console.framing import (
    CloseCode,
    Frame,
    FrameReader,
    Opcode,
    ProtocolError,
    accept_key,
    close_payload,
    encode_frame,
)
from libvirt_provider.console.portforward import ForwardTally

__all__ = ["PortBridge", "switching_protocols"]


def switching_protocols(key: str, protocol: str = c.CONSOLE_SUBPROTOCOL) -> bytes:
    """The 101 answer to a WebSocket upgrade, in the console's subprotocol unless told."""
    return (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept_key(key)}\r\n"
        f"Sec-WebSocket-Protocol: {protocol}\r\n\r\n"
    ).encode("ascii")


class PortBridge:
    """The loop of one forwarded stream; `closed` (from any thread) ends it."""

    def __init__(
        self, conn: socket.socket, guest: socket.socket, *, half_close: bool = False
    ) -> None:
        self._conn = conn
        self._guest = guest
        self._half_close = half_close
        # The client said its input ended; then, once all it sent is written, the guest is told.
        self._client_done = False
        self._guest_told = False
        self._guest.setblocking(False)
        self._to_guest = bytearray()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self._why: str | None = None
        self.tally = ForwardTally()

    def closed(self, reason: str) -> None:
        self._why = reason
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"\0")

    def close(self) -> None:
        for sock in (self._wake_r, self._wake_w, self._guest):
            with contextlib.suppress(OSError):
                sock.close()

    def run(self) -> str:
        """Bridge until the stream ends; why it ended."""
        try:
            return self._loop()
        except OSError as err:
            return f"a connection failed: {err}"

    def _flush_to_guest(self) -> None:
        if self._to_guest:
            self._guest.settimeout(c.CONSOLE_IO_TIMEOUT)
            self._guest.sendall(self._to_guest)
            self.tally.to_guest += len(self._to_guest)
            self._to_guest.clear()

    def _send(self, opcode: Opcode, payload: bytes) -> None:
        self._conn.sendall(encode_frame(opcode, payload))

    def _close_with(self, code: CloseCode, why: str) -> str:
        with contextlib.suppress(OSError):
            self._send(Opcode.CLOSE, close_payload(code, why))
        return why

    def _loop(self) -> str:
        reader = FrameReader(max_payload=c.CONSOLE_MAX_FRAME)
        heard = time.monotonic()
        pinged = heard
        while True:
            if self._client_done and not self._to_guest and not self._guest_told:
                self._guest_told = True
                self._guest.shutdown(socket.SHUT_WR)
            now = time.monotonic()
            if now - heard > c.CONSOLE_PING_SECONDS * c.CONSOLE_SILENT_PINGS:
                return self._close_with(CloseCode.GOING_AWAY, "the client stopped answering")
            if now - pinged >= c.CONSOLE_PING_SECONDS:
                self._send(Opcode.PING, b"vmapi")
                pinged = now
            wait = max(0.0, pinged + c.CONSOLE_PING_SECONDS - now)
            room = len(self._to_guest) < c.PORTFORWARD_BUFFER
            # A TLS socket may hold decrypted bytes that `select` cannot see (a plain one never).
            if room and getattr(self._conn, "pending", lambda: 0)():
                ready: list[Any] = [self._conn]
                writable: list[Any] = []
            else:
                reading = [self._guest, self._wake_r] + ([self._conn] if room else [])
                ready, writable, _ = select.select(
                    reading, [self._guest] if self._to_guest else [], [], wait
                )
            if self._wake_r in ready:
                return self._close_with(CloseCode.GOING_AWAY, self._why or "closed")
            if writable:
                with contextlib.suppress(BlockingIOError):
                    sent = self._guest.send(self._to_guest[: c.PORTFORWARD_READ_CHUNK])
                    del self._to_guest[:sent]
                    self.tally.to_guest += sent
            if self._guest in ready:
                try:
                    data = self._guest.recv(c.PORTFORWARD_READ_CHUNK)
                except BlockingIOError:
                    data = None
                if data == b"":
                    return self._close_with(CloseCode.NORMAL, "the guest closed the connection")
                if data:
                    self.tally.from_guest += len(data)
                    self._send(Opcode.BINARY, data)
            if self._conn in ready:
                try:
                    data = self._conn.recv(c.PORTFORWARD_READ_CHUNK)
                except ssl.SSLWantReadError:
                    continue
                if not data:
                    return "the client disconnected"
                heard = time.monotonic()
                try:
                    frames = reader.feed(data)
                except ProtocolError as err:
                    self._close_with(err.code, str(err))
                    return f"protocol error: {err}"
                ended = self._take(frames)
                if ended is not None:
                    return ended

    def _take(self, frames: list[Frame]) -> str | None:
        """Act on the client's frames; why the stream ended, or None while it goes on."""
        for frame in frames:
            if frame.opcode in (Opcode.BINARY, Opcode.TEXT, Opcode.CONTINUATION):
                if self._client_done and frame.payload:
                    why = "data after the end of the client's input"
                    self._close_with(CloseCode.PROTOCOL_ERROR, why)
                    return f"protocol error: {why}"
                if self._half_close and frame.opcode == Opcode.BINARY and frame.fin:
                    self._client_done = self._client_done or not frame.payload
                self._to_guest += frame.payload
            elif frame.opcode == Opcode.PING:
                self._send(Opcode.PONG, frame.payload)
            elif frame.opcode == Opcode.CLOSE:
                # What the client sent before it left still reaches the guest.
                self._flush_to_guest()
                self._close_with(CloseCode.NORMAL, "")
                return "the client closed the stream"
        return None
