"""The compiled WebSocket mask the plugin and the daemon use for bulk streams: the same bytes as
the pure routine, and found in this environment (a dependency upgrade that moves it fails here
rather than silently halving port-forward's upload rate)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from libvirt_provider.adapters.runtime.websocket_mask import compiled_mask, fast_mask
from libvirt_provider.console.framing import (
    FrameReader,
    Opcode,
    encode_frame,
    mask_in_place,
    mask_payload,
)


def test_the_compiled_routine_is_found_and_used() -> None:
    assert compiled_mask is not None
    assert fast_mask is compiled_mask


@given(payload=st.binary(max_size=5000), mask=st.binary(min_size=4, max_size=4))
def test_it_masks_as_the_definition_says(payload: bytes, mask: bytes) -> None:
    assert compiled_mask is not None
    expected = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    compiled, pure = bytearray(payload), bytearray(payload)
    compiled_mask(compiled, mask)
    mask_in_place(pure, mask)
    assert compiled == expected == pure == mask_payload(payload, mask)


def test_a_frame_masked_by_the_plugin_reads_back_on_the_daemon() -> None:
    payload = os.urandom(300_000)
    frame = encode_frame(Opcode.BINARY, payload, mask=os.urandom(4), masker=fast_mask)
    (read,) = FrameReader(max_payload=1 << 20, unmask=fast_mask).feed(frame)
    assert read.payload == payload


def test_a_mask_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="4 bytes"):
        fast_mask(bytearray(b"data"), b"abc")
