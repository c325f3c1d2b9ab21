"""VNC through the aggregated API, the parts without I/O: the screenshot's route, whether a
machine has a VNC display, the PPM libvirt returns as a PNG (newer libvirt and qemu hand a PNG
already), and enough of RFB to read a
server's greeting and its framebuffer size.

The shells are `adapters/process/vnc_server.py` (the endpoint) and `adapters/plugin/kubectl_vm.py`
(`kubectl vm vnc` and `kubectl vm screenshot`). PNG is written with zlib and struct only: one
IHDR, one IDAT of unfiltered rows, IEND (RFC 2083); RFB is RFC 6143.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.console.auth import Refusal
from libvirt_provider.console.routes import ConsoleRoute

__all__ = [
    "PNG_SIGNATURE",
    "ImageError",
    "RfbError",
    "ServerInit",
    "match_screenshot_route",
    "parse_ppm",
    "parse_rfb_version",
    "parse_server_init",
    "png_size",
    "ppm_to_png",
    "rfb_version_reply",
    "rgb_png",
    "screenshot_png",
    "vnc_refusal",
]

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

_PREFIX = f"/apis/{c.SUBRESOURCE_GROUP}/{c.SUBRESOURCE_VERSION}"
_NAME = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
_SCREENSHOT = re.compile(
    rf"^{re.escape(_PREFIX)}/namespaces/(?P<ns>{_NAME})/{c.CONSOLE_RESOURCE}/(?P<name>{_NAME})"
    rf"/{c.VNC_SUBRESOURCE}/{c.VNC_SCREENSHOT_PATH}$"
)


def match_screenshot_route(path: str) -> ConsoleRoute | None:
    """The machine a screenshot request names (its subresource is `vnc`: what the API server
    authorised and the daemon's review asks again), or None for any other path."""
    found = _SCREENSHOT.match(path.split("?", 1)[0])
    if found is None:
        return None
    return ConsoleRoute(found.group("ns"), found.group("name"), c.VNC_SUBRESOURCE)


def vnc_refusal(name: str, machine: Mapping[str, Any]) -> Refusal | None:
    """Why the machine has no VNC display to open (its spec asks for none, or for SPICE), or
    None. Read from the spec: what the domain was built with."""
    graphics = ((machine.get("spec") or {}).get("console") or {}).get("graphics") or "None"
    if graphics == "VNC":
        return None
    return Refusal(
        409,
        "Conflict",
        f"LibvirtMachine {name} has no VNC display (spec.console.graphics is {graphics}; "
        "set it to VNC)",
    )


# -- images --------------------------------------------------------------------------------------


class ImageError(ValueError):
    """An image that is not what it claims to be."""


_PPM_TOKEN = re.compile(rb"(?:\s|#[^\n]*\n)*(\S+)")


def parse_ppm(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and 8-bit RGB pixels of a binary PPM (P6), as qemu's screendump writes it
    through virDomainScreenshot. Samples of 16 bits (maxval over 255) are scaled to 8."""
    fields: list[int] = []
    pos = 0
    magic = _PPM_TOKEN.match(data, pos)
    if magic is None or magic.group(1) != b"P6":
        raise ImageError("not a binary PPM (P6) image")
    pos = magic.end()
    for _ in range(3):
        token = _PPM_TOKEN.match(data, pos)
        if token is None or not token.group(1).isdigit():
            raise ImageError("malformed PPM header")
        fields.append(int(token.group(1)))
        pos = token.end()
    width, height, maxval = fields
    if width <= 0 or height <= 0 or not 0 < maxval < 65536:
        raise ImageError(f"PPM header out of range: {width}x{height}, maxval {maxval}")
    pos += 1  # the single whitespace byte after maxval
    sample = 1 if maxval < 256 else 2
    size = width * height * 3 * sample
    pixels = data[pos : pos + size]
    if len(pixels) != size:
        raise ImageError(f"PPM pixels cut short: {len(pixels)} of {size} bytes")
    if sample == 2:
        wide = struct.unpack(f">{width * height * 3}H", pixels)
        pixels = bytes(v * 255 // maxval for v in wide)
    elif maxval != 255:
        pixels = bytes(v * 255 // maxval for v in pixels)
    return width, height, pixels


def _chunk(kind: bytes, body: bytes) -> bytes:
    return (
        struct.pack(">I", len(body))
        + kind
        + body
        + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    )


def rgb_png(width: int, height: int, pixels: bytes) -> bytes:
    """A PNG (8-bit RGB, not interlaced) of `pixels`, rows top to bottom."""
    stride = width * 3
    if len(pixels) != stride * height:
        raise ImageError(f"{len(pixels)} bytes are not {width}x{height} RGB pixels")
    raw = b"".join(b"\0" + pixels[row * stride : (row + 1) * stride] for row in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        PNG_SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw, 6))
        + _chunk(b"IEND", b"")
    )


def ppm_to_png(data: bytes) -> bytes:
    """A PPM as a PNG."""
    return rgb_png(*parse_ppm(data))


def screenshot_png(data: bytes) -> bytes:
    """libvirt's screenshot as a PNG: qemu's screendump is a PPM, or already a PNG when libvirt
    and qemu are new enough to ask for one (checked, then passed on as it is)."""
    if data.startswith(PNG_SIGNATURE):
        png_size(data)
        return data
    return ppm_to_png(data)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR, after checking its signature and the chunk's CRC."""
    if len(data) < 33 or not data.startswith(PNG_SIGNATURE):
        raise ImageError("not a PNG")
    length, kind = struct.unpack(">I4s", data[8:16])
    if kind != b"IHDR" or length != 13:
        raise ImageError("a PNG's first chunk must be a 13-byte IHDR")
    body = data[16:29]
    (crc,) = struct.unpack(">I", data[29:33])
    if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
        raise ImageError("the PNG's IHDR fails its CRC")
    width, height = struct.unpack(">II", body[:8])
    return int(width), int(height)


# -- RFB (RFC 6143) ------------------------------------------------------------------------------


class RfbError(ValueError):
    """A server that does not speak RFB as expected."""


_VERSION = re.compile(rb"^RFB (\d{3})\.(\d{3})\n$")


def parse_rfb_version(greeting: bytes) -> tuple[int, int]:
    """The protocol version in a server's 12-byte ProtocolVersion message ("RFB 003.008\\n")."""
    found = _VERSION.match(greeting)
    if found is None:
        raise RfbError(f"not an RFB greeting: {greeting[:12]!r}")
    return int(found.group(1)), int(found.group(2))


def rfb_version_reply(server: tuple[int, int]) -> bytes:
    """The client's ProtocolVersion: the server's, capped at 3.8 (the newest RFC 6143 knows)."""
    major, minor = min(server, (3, 8))
    return b"RFB %03d.%03d\n" % (major, minor)


@dataclass(frozen=True)
class ServerInit:
    width: int
    height: int
    name: str


def parse_server_init(data: bytes) -> ServerInit:
    """The ServerInit message: the framebuffer's size, its pixel format (skipped) and the
    desktop's name. `data` must hold the whole message."""
    if len(data) < 24:
        raise RfbError(f"ServerInit cut short: {len(data)} bytes")
    width, height = struct.unpack(">HH", data[:4])
    (name_length,) = struct.unpack(">I", data[20:24])
    name = data[24 : 24 + name_length]
    if len(name) != name_length:
        raise RfbError("ServerInit's name cut short")
    return ServerInit(int(width), int(height), name.decode("utf-8", "replace"))
