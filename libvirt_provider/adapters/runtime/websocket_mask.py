"""The WebSocket mask at C speed, for the streams that carry bulk data (port-forward, pastes).

Why: every byte a client sends is masked by the plugin and unmasked by the daemon (RFC 6455), and
the pure routine (`console/framing.py`'s `mask_in_place`, about 1 ms per MiB) was still the largest
single cost of an upload through `kubectl vm port-forward` on both ends. aiohttp, which kopf
brings, ships a compiled masking routine (some 0.04 ms per MiB); `compiled_mask` is it wrapped to
`Masker`'s shape, or None where that aiohttp build has none (pure-Python wheels, or a release
that moved it), and `fast_mask` is the best one at hand. The unit tests check both against the
byte-by-byte definition, and that this environment finds the compiled one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from libvirt_provider.console.framing import Masker, mask_in_place

__all__ = ["compiled_mask", "fast_mask"]

# Where aiohttp keeps it: 3.11 and later, then the releases before.
_PLACES = ("aiohttp._websocket.mask", "aiohttp._websocket")


def _find() -> Callable[[bytes, bytearray], None] | None:
    for place in _PLACES:
        try:
            module = importlib.import_module(place)
        except ImportError:
            continue
        routine = getattr(module, "_websocket_mask_cython", None)
        if callable(routine):
            return routine  # type: ignore[no-any-return]
    return None


_ROUTINE = _find()


def _compiled(data: bytearray, mask: bytes) -> None:
    if len(mask) != 4:
        raise ValueError("a WebSocket mask is 4 bytes")
    assert _ROUTINE is not None  # only handed out when found
    _ROUTINE(bytes(mask), data)


compiled_mask: Masker | None = _compiled if _ROUTINE is not None else None
fast_mask: Masker = compiled_mask or mask_in_place
