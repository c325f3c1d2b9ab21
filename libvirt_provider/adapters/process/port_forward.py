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

Both sockets are non-blocking and each direction has a buffer written as its socket takes it, so
neither side's slowness stalls the other (an echo would otherwise stall on itself); past
`PORTFORWARD_BUFFER` bytes waiting for one side, nothing more is read from the other until it
drains. A TLS write that could not finish is retried with the same bytes, as OpenSSL requires.
Memory stays two buffers and a frame's worth per stream. A client that stops reading stops
answering pings too, and is let go as on the console; the last frames (the close) are given
`CONSOLE_IO_TIMEOUT` to go out.

Cost: each wake-up takes all that a side has ready, up to `PORTFORWARD_BATCH`, not one read's
worth: a TLS read returns one 16 KiB record, and the loop's own cost per wake-up was most of what
an upload cost the daemon (bench/forward_loops.py measures it).
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Callable
from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.adapters.runtime.stream_io import Outbox, read_ready
from libvirt_provider.adapters.runtime.websocket_mask import fast_mask
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
        self._to_guest = bytearray()
        self._to_client = Outbox(c.PORTFORWARD_BATCH)
        # Decrypted bytes a TLS socket holds that `select` cannot see (a plain socket has none).
        self._pending: Callable[[], int] = getattr(conn, "pending", lambda: 0)
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
        self._conn.setblocking(False)
        self._guest.setblocking(False)
        try:
            return self._loop()
        except OSError as err:
            return f"a connection failed: {err}"

    # -- toward the guest ---------------------------------------------------------------------

    def _write_guest(self) -> None:
        if self._to_guest:
            with contextlib.suppress(BlockingIOError):
                sent = self._guest.send(self._to_guest)
                del self._to_guest[:sent]
                self.tally.to_guest += sent

    def _to_guest_now(self, payload: bytes) -> None:
        """Straight to the guest when nothing waits before it (most often all of it goes: no copy
        into the buffer); what the guest does not take waits in the buffer."""
        sent = 0
        if not self._to_guest and payload:
            with contextlib.suppress(BlockingIOError):
                sent = self._guest.send(payload)
                self.tally.to_guest += sent
        if sent < len(payload):
            with memoryview(payload) as view:
                self._to_guest += view[sent:]

    def _flush_to_guest(self) -> None:
        if self._to_guest:
            self._guest.settimeout(c.CONSOLE_IO_TIMEOUT)
            self._guest.sendall(self._to_guest)
            self.tally.to_guest += len(self._to_guest)
            self._to_guest.clear()

    def _read_guest(self) -> bytes | None:
        """What the guest has ready, up to a batch; b"" once it closed, None if nothing was."""
        reading = read_ready(self._guest, chunk=c.PORTFORWARD_READ_CHUNK, limit=c.PORTFORWARD_BATCH)
        if reading.failure is not None:
            raise reading.failure
        if reading.ended:
            return b""
        return b"".join(reading.pieces) if reading.pieces else None

    # -- toward the client --------------------------------------------------------------------

    def _send(self, opcode: Opcode, payload: bytes) -> None:
        self._to_client.add(encode_frame(opcode, payload))

    def _flush_client(self) -> None:
        self._to_client.flush(self._conn)

    def _close_with(self, code: CloseCode, why: str) -> str:
        """The close frame after what is queued, given `CONSOLE_IO_TIMEOUT` to go out."""
        self._send(Opcode.CLOSE, close_payload(code, why))
        deadline = time.monotonic() + c.CONSOLE_IO_TIMEOUT
        with contextlib.suppress(OSError):
            while True:
                self._flush_client()
                left = deadline - time.monotonic()
                if not self._to_client or left <= 0:
                    break
                select.select([], [self._conn], [], left)
        return why

    # -- from the client ----------------------------------------------------------------------

    def _read_client(self) -> list[bytes] | None:
        """What the client has ready, up to a batch, as read (fed to the frame reader piece by
        piece, never joined); empty if nothing was (a TLS record still incomplete), None once
        the client is gone."""
        reading = read_ready(self._conn, chunk=c.TLS_READ_CHUNK, limit=c.PORTFORWARD_BATCH)
        if reading.failure is not None:
            raise reading.failure
        return None if reading.ended else reading.pieces

    # -- the loop -----------------------------------------------------------------------------

    def _loop(self) -> str:
        reader = FrameReader(max_payload=c.CONSOLE_MAX_FRAME, unmask=fast_mask)
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
            guest_room = len(self._to_guest) < c.PORTFORWARD_BUFFER
            client_room = len(self._to_client) < c.PORTFORWARD_BUFFER
            if guest_room and self._pending():
                ready: list[Any] = [self._conn]
            else:
                reading = [self._wake_r]
                reading += [self._guest] if client_room else []
                reading += [self._conn] if guest_room else []
                writing = [self._guest] if self._to_guest else []
                writing += [self._conn] if self._to_client else []
                ready, _, _ = select.select(reading, writing, [], wait)
            if self._wake_r in ready:
                return self._close_with(CloseCode.GOING_AWAY, self._why or "closed")
            if self._guest in ready:
                data = self._read_guest()
                if data == b"":
                    return self._close_with(CloseCode.NORMAL, "the guest closed the connection")
                if data:
                    self.tally.from_guest += len(data)
                    self._send(Opcode.BINARY, data)
            if self._conn in ready:
                pieces = self._read_client()
                if pieces is None:
                    return "the client disconnected"
                if pieces:
                    heard = time.monotonic()
                for piece in pieces:
                    try:
                        frames = reader.feed(piece)
                    except ProtocolError as err:
                        self._close_with(err.code, str(err))
                        return f"protocol error: {err}"
                    ended = self._take(frames)
                    if ended is not None:
                        return ended
            # Whether or not `select` said so: most often each side takes its bytes at once.
            self._write_guest()
            self._flush_client()

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
                self._to_guest_now(frame.payload)
            elif frame.opcode == Opcode.PING:
                self._send(Opcode.PONG, frame.payload)
            elif frame.opcode == Opcode.CLOSE:
                # What the client sent before it left still reaches the guest.
                self._flush_to_guest()
                self._close_with(CloseCode.NORMAL, "")
                return "the client closed the stream"
        return None
