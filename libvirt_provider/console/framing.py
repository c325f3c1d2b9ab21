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
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "CloseCode",
    "Frame",
    "FrameReader",
    "Masker",
    "Opcode",
    "ProtocolError",
    "accept_key",
    "close_payload",
    "encode_frame",
    "frame_head",
    "mask_in_place",
    "mask_payload",
    "masked_body",
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


# One XOR table per key byte: masking a payload is then four strided `translate`s, done in C,
# about three times as fast as XOR over the payload taken as one big integer.
_XOR_TABLES = tuple(bytes(value ^ key for value in range(256)) for key in range(256))

# How a payload is masked in place: `mask_in_place`, or a compiled routine an adapter hands in.
Masker = Callable[[bytearray, bytes], None]


def mask_in_place(data: bytearray, mask: bytes) -> None:
    """XOR `data` with the 4-byte `mask` (masking and unmasking are the same operation)."""
    if len(mask) != 4:
        raise ValueError("a WebSocket mask is 4 bytes")
    for offset in range(4):
        data[offset::4] = data[offset::4].translate(_XOR_TABLES[mask[offset]])


def mask_payload(payload: bytes, mask: bytes) -> bytes:
    """`payload` masked with `mask`, as a copy."""
    data = bytearray(payload)
    mask_in_place(data, mask)
    return bytes(data)


def frame_head(
    opcode: Opcode, length: int, *, fin: bool = True, mask: bytes | None = None
) -> bytes:
    """A frame's header (and mask) for a payload of `length` bytes; `encode_frame` is the whole
    frame, this for a caller that appends the payload itself."""
    if opcode >= Opcode.CLOSE and length > _MAX_CONTROL:
        raise ValueError("a control frame's payload is at most 125 bytes")
    first = (0x80 if fin else 0) | int(opcode)
    mask_bit = 0x80 if mask is not None else 0
    if length < 126:
        header = struct.pack("!BB", first, mask_bit | length)
    elif length < 1 << 16:
        header = struct.pack("!BBH", first, mask_bit | 126, length)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, length)
    return header if mask is None else header + mask


def masked_body(payload: bytes, mask: bytes, masker: Masker = mask_in_place) -> bytearray:
    """A client frame's payload, masked (one copy of `payload`)."""
    body = bytearray(payload)
    masker(body, mask)
    return body


def encode_frame(
    opcode: Opcode,
    payload: bytes = b"",
    *,
    fin: bool = True,
    mask: bytes | None = None,
    masker: Masker = mask_in_place,
) -> bytes:
    """One frame; `mask` for a client's frames (a server sends none)."""
    head = frame_head(opcode, len(payload), fin=fin, mask=mask)
    if mask is None:
        return head + payload
    return head + masked_body(payload, mask, masker)


def close_payload(code: CloseCode, reason: str = "") -> bytes:
    """A close frame's payload: the code and a reason cut to fit 125 bytes (on a UTF-8 boundary)."""
    raw = reason.encode("utf-8")[: _MAX_CONTROL - 2]
    return struct.pack("!H", int(code)) + raw.decode("utf-8", "ignore").encode("utf-8")


class FrameReader:
    """Bytes in, whole frames out; at most `max_payload` bytes buffered for one frame."""

    def __init__(
        self, *, max_payload: int, require_mask: bool = True, unmask: Masker = mask_in_place
    ) -> None:
        self._max = max_payload
        self._require_mask = require_mask
        self._unmask = unmask
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
        if not masked:
            with memoryview(buf) as view:
                payload = bytes(view[offset : offset + length])
        else:
            # One copy out of the buffer, unmasked in place, one into the frame.
            body = buf[offset : offset + length]
            self._unmask(body, mask)
            payload = bytes(body)
        del buf[: offset + length]
        return Frame(fin=fin, opcode=opcode, payload=payload)
