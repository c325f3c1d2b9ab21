"""WebSocket (RFC 6455) framing for the console stream: the handshake's accept key, frames out,
and a reader that turns received bytes into frames. Pure: no sockets, so every rule is unit-tested.

The server's side only: frames from a client must be masked, frames to it are not. A frame larger
than the reader's bound, a reserved bit, an unknown opcode or a fragmented or oversized control
frame is a `ProtocolError` (the connection is closed with 1002 or 1009). Fragmented data messages
are passed on frame by frame: the console's bytes are a stream, not messages.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "CloseCode",
    "Frame",
    "FrameReader",
    "Opcode",
    "ProtocolError",
    "accept_key",
    "close_payload",
    "encode_frame",
    "mask_payload",
]

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_MAX_CONTROL = 125


class Opcode(IntEnum):
    CONTINUATION = 0x0
    TEXT = 0x1
    BINARY = 0x2
    CLOSE = 0x8
    PING = 0x9
    PONG = 0xA


class CloseCode(IntEnum):
    NORMAL = 1000
    GOING_AWAY = 1001
    PROTOCOL_ERROR = 1002
    POLICY_VIOLATION = 1008
    TOO_BIG = 1009
    INTERNAL_ERROR = 1011


class ProtocolError(Exception):
    """The peer broke the protocol; `code` is the close code to answer with."""

    def __init__(self, code: CloseCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Frame:
    fin: bool
    opcode: Opcode
    payload: bytes


def accept_key(key: str) -> str:
    """The `Sec-WebSocket-Accept` value answering a client's `Sec-WebSocket-Key`."""
    digest = hashlib.sha1((key.strip() + _GUID).encode("ascii"), usedforsecurity=False).digest()
    return base64.b64encode(digest).decode("ascii")


def mask_payload(payload: bytes, mask: bytes) -> bytes:
    """XOR `payload` with the 4-byte `mask` (masking and unmasking are the same operation)."""
    if len(mask) != 4:
        raise ValueError("a WebSocket mask is 4 bytes")
    if not payload:
        return payload
    repeated = (mask * (len(payload) // 4 + 1))[: len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(
        len(payload), "big"
    )


def encode_frame(
    opcode: Opcode, payload: bytes = b"", *, fin: bool = True, mask: bytes | None = None
) -> bytes:
    """One frame; `mask` for a client's frames (a server sends none)."""
    if opcode >= Opcode.CLOSE and len(payload) > _MAX_CONTROL:
        raise ValueError("a control frame's payload is at most 125 bytes")
    first = (0x80 if fin else 0) | int(opcode)
    mask_bit = 0x80 if mask is not None else 0
    length = len(payload)
    if length < 126:
        header = struct.pack("!BB", first, mask_bit | length)
    elif length < 1 << 16:
        header = struct.pack("!BBH", first, mask_bit | 126, length)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, length)
    if mask is None:
        return header + payload
    return header + mask + mask_payload(payload, mask)


def close_payload(code: CloseCode, reason: str = "") -> bytes:
    """A close frame's payload: the code and a reason cut to fit 125 bytes (on a UTF-8 boundary)."""
    raw = reason.encode("utf-8")[: _MAX_CONTROL - 2]
    return struct.pack("!H", int(code)) + raw.decode("utf-8", "ignore").encode("utf-8")


class FrameReader:
    """Bytes in, whole frames out; at most `max_payload` bytes buffered for one frame."""

    def __init__(self, *, max_payload: int, require_mask: bool = True) -> None:
        self._max = max_payload
        self._require_mask = require_mask
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        frames: list[Frame] = []
        while (frame := self._next()) is not None:
            frames.append(frame)
        return frames

    def _next(self) -> Frame | None:
        buf = self._buffer
        if len(buf) < 2:
            return None
        first, second = buf[0], buf[1]
        if first & 0x70:
            raise ProtocolError(CloseCode.PROTOCOL_ERROR, "reserved bits set")
        try:
            opcode = Opcode(first & 0x0F)
        except ValueError:
            raise ProtocolError(
                CloseCode.PROTOCOL_ERROR, f"unknown opcode {first & 0x0F}"
            ) from None
        fin = bool(first & 0x80)
        masked = bool(second & 0x80)
        if self._require_mask and not masked:
            raise ProtocolError(CloseCode.PROTOCOL_ERROR, "a client's frames must be masked")
        length = second & 0x7F
        offset = 2
        if length == 126:
            if len(buf) < 4:
                return None
            (length,) = struct.unpack_from("!H", buf, 2)
            offset = 4
        elif length == 127:
            if len(buf) < 10:
                return None
            (length,) = struct.unpack_from("!Q", buf, 2)
            offset = 10
        if opcode >= Opcode.CLOSE and (length > _MAX_CONTROL or not fin):
            raise ProtocolError(
                CloseCode.PROTOCOL_ERROR, "an oversized or fragmented control frame"
            )
        if length > self._max:
            raise ProtocolError(
                CloseCode.TOO_BIG, f"a frame of {length} bytes (at most {self._max})"
            )
        mask = b""
        if masked:
            if len(buf) < offset + 4:
                return None
            mask = bytes(buf[offset : offset + 4])
            offset += 4
        if len(buf) < offset + length:
            return None
        payload = bytes(buf[offset : offset + length])
        del buf[: offset + length]
        if masked:
            payload = mask_payload(payload, mask)
        return Frame(fin=fin, opcode=opcode, payload=payload)
