"""WebSocket framing of the console stream (RFC 6455, the server's side)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from libvirt_provider.console.framing import (
    CloseCode,
    FrameReader,
    Opcode,
    ProtocolError,
    accept_key,
    close_payload,
    encode_frame,
    mask_payload,
)

MASK = b"\x01\x02\x03\x04"


def test_the_accept_key_is_rfc_6455s_example() -> None:
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 200_000])
def test_a_masked_client_frame_of_any_length_reads_back(size: int) -> None:
    payload = bytes(i % 251 for i in range(size))
    reader = FrameReader(max_payload=1 << 20)
    frames = reader.feed(encode_frame(Opcode.BINARY, payload, mask=MASK))
    assert len(frames) == 1
    assert frames[0].payload == payload
    assert frames[0].opcode == Opcode.BINARY
    assert frames[0].fin


def test_frames_split_anywhere_and_joined_read_the_same() -> None:
    data = encode_frame(Opcode.BINARY, b"ls -l\n", mask=MASK) + encode_frame(
        Opcode.PING, b"x", mask=MASK
    )
    reader = FrameReader(max_payload=1024)
    frames = []
    for byte in data:
        frames += reader.feed(bytes([byte]))
    got = [(f.opcode, f.payload) for f in frames]
    assert got == [(Opcode.BINARY, b"ls -l\n"), (Opcode.PING, b"x")]


def test_an_unmasked_client_frame_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError) as err:
        FrameReader(max_payload=1024).feed(encode_frame(Opcode.BINARY, b"hi"))
    assert err.value.code == CloseCode.PROTOCOL_ERROR


def test_a_frame_over_the_bound_is_refused_before_its_payload_arrives() -> None:
    header_only = encode_frame(Opcode.BINARY, b"x" * 2000, mask=MASK)[:8]
    with pytest.raises(ProtocolError) as err:
        FrameReader(max_payload=1024).feed(header_only)
    assert err.value.code == CloseCode.TOO_BIG


@pytest.mark.parametrize(
    "raw",
    [
        bytes([0x80 | 0x40 | 0x2, 0x80]) + MASK,  # a reserved bit
        bytes([0x80 | 0x3, 0x80]) + MASK,  # an unknown opcode
        bytes([0x09, 0x80]) + MASK,  # a fragmented ping
        bytes([0x80 | 0x9, 0x80 | 126, 0, 200]) + MASK,  # an oversized ping
    ],
)
def test_broken_frames_are_protocol_errors(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        FrameReader(max_payload=1024).feed(raw)


def test_server_frames_are_unmasked_and_control_frames_bounded() -> None:
    assert encode_frame(Opcode.BINARY, b"ok") == b"\x82\x02ok"
    with pytest.raises(ValueError, match="125"):
        encode_frame(Opcode.CLOSE, b"x" * 126)


def test_masking_twice_is_the_identity() -> None:
    assert mask_payload(mask_payload(b"hello world", MASK), MASK) == b"hello world"


def test_a_masked_frame_is_rfc_6455s_example() -> None:
    mask = bytes([0x37, 0xFA, 0x21, 0x3D])
    assert encode_frame(Opcode.TEXT, b"Hello", mask=mask) == bytes(
        [0x81, 0x85, 0x37, 0xFA, 0x21, 0x3D, 0x7F, 0x9F, 0x4D, 0x51, 0x58]
    )


@given(payload=st.binary(max_size=4099), mask=st.binary(min_size=4, max_size=4))
def test_masking_is_each_byte_xored_with_the_key_byte_at_its_offset(
    payload: bytes, mask: bytes
) -> None:
    assert mask_payload(payload, mask) == bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def test_a_close_reason_is_cut_to_fit_on_a_character_boundary() -> None:
    payload = close_payload(CloseCode.GOING_AWAY, "é" * 100)
    assert len(payload) <= 125
    assert payload[:2] == b"\x03\xe9"
    payload[2:].decode("utf-8")  # whole characters only
