"""The plugin's end of one WebSocket stream, on one thread: a local input, a local output and the
connection to the API server in one `select` loop.

Why one thread: the plugin used to read the WebSocket on one thread while another wrote to it,
and an OpenSSL connection is not safe for a read and a write at once from two threads; under load
a stream broke with "EOF in violation of protocol". Here one loop owns the socket, non-blocking:
frames for the server wait in a buffer sent as the socket takes it (a TLS write that could not
finish is retried with the same bytes, as OpenSSL requires), frames from the server are read
whenever they come, so neither side's writing can stall on the other's. Writes to the local
output block: a slow reader of the plugin's output holds the stream back, as a pipe would.

The end of the local input: with the port-forward subprotocol's half-close
(`PORTFORWARD_SUBPROTOCOL`) an empty binary frame tells the server, and the stream goes on until
the server closes it (the guest has answered and closed); otherwise the plugin sends its close
frame and waits for the server's (as long as the server keeps talking: it answers only once the
guest took the input before it). `run` returns the server's close reason.

Only the socket is used after websocket-client's handshake (its handshake reads the response byte
by byte, so nothing of the stream is buffered there).
"""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Callable

import websocket

from libvirt_provider import constants as c
from libvirt_provider.adapters.runtime.stream_io import Outbox, read_ready
from libvirt_provider.adapters.runtime.websocket_mask import fast_mask
from libvirt_provider.console.framing import (
    CloseCode,
    FrameReader,
    Opcode,
    ProtocolError,
    close_payload,
    frame_head,
    masked_body,
)

__all__ = ["Pump", "Transform", "carry"]

# What the plugin makes of a read of local input: the bytes to send, and whether to leave after.
Transform = Callable[[bytes], tuple[bytes, bool]]

_CHUNK = 64 * 1024
# Bytes taken from the server per wake-up while more is ready, read from the local input at once
# and handed to one TLS send.
_BATCH = c.PORTFORWARD_BATCH
# Frames waiting for the server past which local input is no longer read.
_OUT_LIMIT = 1 << 20


def _pending(sock: socket.socket) -> int:
    """Bytes a TLS socket has decrypted and not handed out yet (a plain socket has none)."""
    pending = getattr(sock, "pending", None)
    return int(pending()) if pending is not None else 0


class Pump:
    """One stream: `source` (a readable descriptor, or None) to the server, the server's data to
    `sink`; `transform` decides what a read of input sends and whether to leave."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        sink: Callable[[bytes], None],
        source: int | None = None,
        transform: Transform | None = None,
        half_close: bool = False,
        silence: float = c.CONSOLE_PING_SECONDS * c.CONSOLE_SILENT_PINGS,
        close_wait: float = c.PLUGIN_CLOSE_WAIT,
    ) -> None:
        self._sock = sock
        self._sink = sink
        self._source = source
        self._transform = transform
        self._half_close = half_close
        self._silence = silence
        self._close_wait = close_wait
        self._reader = FrameReader(max_payload=c.PLUGIN_MAX_FRAME, require_mask=False)
        self._out = Outbox(_BATCH)
        self._deadline: float | None = None
        self._closing = False
        self._sink_broken = False
        self._broken = False
        self._heard = 0.0
        self.reason = ""
        self.closed_by_server = False

    # -- frames out ---------------------------------------------------------------------------

    def _queue(self, opcode: Opcode, payload: bytes = b"") -> None:
        mask = os.urandom(4)
        self._out.add(frame_head(opcode, len(payload), mask=mask))
        self._out.add(masked_body(payload, mask, fast_mask))

    def _begin_close(self, code: CloseCode, why: str = "", *, wait: bool = True) -> None:
        """Send a close frame after what is queued; then wait `close_wait` for the server's, or
        without `wait` as long as the server keeps talking (pings; the silence limit)."""
        if not self._closing:
            self._closing = True
            self._queue(Opcode.CLOSE, close_payload(code, why))
            self._deadline = time.monotonic() + self._close_wait if wait else None
        self._source = None

    def _flush(self) -> None:
        try:
            self._out.flush(self._sock)
        except OSError as err:
            self._out.clear()
            self._broken = True
            if not self.reason:
                self.reason = f"the connection failed: {err}"

    # -- frames in ----------------------------------------------------------------------------

    def _deliver(self, data: bytes) -> None:
        if self._sink_broken:
            return
        try:
            self._sink(data)
        except OSError:
            # The local side went away: nothing more can be delivered, so the stream ends.
            self._sink_broken = True
            self._begin_close(CloseCode.NORMAL)

    def _receive(self) -> bool:
        """Read what the server sent; False once the stream is over."""
        # All that is ready, not one TLS record (16 KiB) per wake-up: the loop's own cost per
        # wake-up, not the bytes, bounded a forwarded stream.
        reading = read_ready(self._sock, chunk=c.TLS_READ_CHUNK, limit=_BATCH)
        pieces = reading.pieces
        # A failure after some bytes is seen on the next wake-up, after them.
        if reading.failure is not None and not pieces:
            if not self.closed_by_server and not self.reason:
                self.reason = f"the connection failed: {reading.failure}"
            return False
        if reading.ended:
            if not self.closed_by_server and not self.reason:
                self.reason = "the connection closed"
            return False
        if not pieces:
            return True
        data = b"".join(pieces)
        self._heard = time.monotonic()
        try:
            frames = self._reader.feed(data)
        except ProtocolError as err:
            self.reason = f"protocol error: {err}"
            self._begin_close(err.code, str(err))
            return True
        for frame in frames:
            if frame.opcode in (Opcode.BINARY, Opcode.TEXT, Opcode.CONTINUATION):
                if frame.payload:
                    self._deliver(frame.payload)
            elif frame.opcode == Opcode.PING:
                self._queue(Opcode.PONG, frame.payload)
            elif frame.opcode == Opcode.CLOSE:
                self.closed_by_server = True
                if len(frame.payload) > 2:
                    self.reason = frame.payload[2:].decode("utf-8", "replace")
                if not self._closing:
                    # Answered, then the loop sends what is queued and ends.
                    self._closing = True
                    self._queue(Opcode.CLOSE, frame.payload[:2])
                    self._deadline = time.monotonic() + self._close_wait
                self._source = None
        return True

    # -- local input --------------------------------------------------------------------------

    def _read_source(self, fd: int) -> None:
        try:
            data = os.read(fd, _BATCH)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._source = None
            if self._half_close:
                self._queue(Opcode.BINARY, b"")
            else:
                # The input's end (a script's, a piped file's) comes long before the guest took
                # it all: the server answers the close only after the input before it, at the
                # guest's pace, and leaving earlier would drop what is still on its way.
                self._begin_close(CloseCode.NORMAL, wait=False)
            return
        send, leave = self._transform(data) if self._transform else (data, False)
        if send:
            self._queue(Opcode.BINARY, send)
        if leave:
            self._begin_close(CloseCode.NORMAL)

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> str:
        """Carry the stream until it ends; the server's close reason ('' when it gave none)."""
        self._sock.setblocking(False)
        self._heard = time.monotonic()
        while True:
            now = time.monotonic()
            if self._broken:
                return self.reason
            if self._closing and (self.closed_by_server or self._sink_broken) and not self._out:
                return self.reason
            if self._deadline is not None and now > self._deadline:
                return self.reason
            if self._deadline is None and now - self._heard > self._silence:
                self.reason = "the server stopped answering"
                return self.reason
            reading: list[int | socket.socket] = [self._sock]
            source = self._source
            if source is not None and len(self._out) < _OUT_LIMIT:
                reading.append(source)
            if _pending(self._sock):
                ready: list[int | socket.socket] = [self._sock]
                writable: list[int | socket.socket] = [self._sock] if self._out else []
            else:
                limit = self._heard + self._silence
                if self._deadline is not None:
                    limit = self._deadline
                ready, writable, _ = select.select(
                    reading, [self._sock] if self._out else [], [], max(0.0, limit - now)
                )
            if writable:
                self._flush()
            if self._sock in ready and not self._receive():
                return self.reason
            if source is not None and source in ready and self._source is not None:
                self._read_source(source)
            if self._out:
                self._flush()


def carry(
    ws: websocket.WebSocket,
    *,
    sink: Callable[[bytes], None],
    source: int | None = None,
    transform: Transform | None = None,
    half_close: bool = False,
) -> Pump:
    """Carry an open WebSocket's stream to its end with a `Pump`, then drop the connection
    (the close frames were exchanged, or the connection is gone); the pump, for its reason."""
    sock = ws.sock
    if sock is None:
        raise ValueError("the WebSocket is not connected")
    pump = Pump(sock, sink=sink, source=source, transform=transform, half_close=half_close)
    try:
        pump.run()
    except OSError as err:
        pump.reason = pump.reason or f"the connection failed: {err}"
    finally:
        ws.shutdown()  # type: ignore[no-untyped-call]
    return pump
