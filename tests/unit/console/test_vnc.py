"""VNC's pure parts: the screenshot's route, which machines have a display, PPM to PNG, and the
RFB messages the e2e test reads."""

from __future__ import annotations

import struct
import zlib

import pytest

from libvirt_provider.console.client import console_path
from libvirt_provider.console.routes import ConsoleRoute, match_route
from libvirt_provider.console.vnc import (
    PNG_SIGNATURE,
    ImageError,
    RfbError,
    ServerInit,
    match_screenshot_route,
    parse_ppm,
    parse_rfb_version,
    parse_server_init,
    png_size,
    ppm_to_png,
    rfb_version_reply,
    screenshot_png,
    vnc_refusal,
)

PREFIX = "/apis/subresources.infrastructure.vm-api.io/v1alpha1"


def test_the_vnc_stream_and_its_screenshot_are_routes_authorised_as_vnc() -> None:
    stream = console_path("team-a", "vm1", "vnc")
    assert match_route(stream) == ConsoleRoute("team-a", "vm1", "vnc")
    assert match_screenshot_route(stream) is None
    shot = f"{stream}/screenshot?x=1"
    assert match_screenshot_route(shot) == ConsoleRoute("team-a", "vm1", "vnc")
    assert match_route(shot) is None


@pytest.mark.parametrize(
    "path",
    [
        f"{PREFIX}/namespaces/team-a/libvirtmachines/vm1/console/screenshot",
        f"{PREFIX}/namespaces/team-a/libvirtmachines/vm1/vnc/screenshot/more",
        f"{PREFIX}/namespaces/../libvirtmachines/vm1/vnc/screenshot",
        "/apis/other/v1/namespaces/a/libvirtmachines/vm1/vnc/screenshot",
    ],
)
def test_other_paths_are_no_screenshot(path: str) -> None:
    assert match_screenshot_route(path) is None


def test_only_a_machine_with_vnc_graphics_has_a_display() -> None:
    assert vnc_refusal("vm1", {"spec": {"console": {"graphics": "VNC"}}}) is None
    for spec in ({}, {"console": {}}, {"console": {"graphics": "SPICE"}}):
        refusal = vnc_refusal("vm1", {"spec": spec})
        assert refusal is not None
        assert refusal.code == 409
        assert "spec.console.graphics" in refusal.message


def _ppm(width: int, height: int, pixels: bytes, *, maxval: int = 255) -> bytes:
    return b"P6\n# qemu\n%d %d\n%d\n" % (width, height, maxval) + pixels


def _png_pixels(png: bytes) -> bytes:
    """The IDAT's rows without their filter bytes (all 0: none)."""
    width, height = png_size(png)
    pos, idat = 8, b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind = png[pos + 4 : pos + 8]
        body = png[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", png[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc
        if kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert png.endswith(b"IEND\xaeB`\x82")
    raw = zlib.decompress(idat)
    stride = width * 3 + 1
    assert len(raw) == stride * height
    assert all(raw[row * stride] == 0 for row in range(height))
    return b"".join(raw[row * stride + 1 : (row + 1) * stride] for row in range(height))


def test_a_ppm_becomes_a_png_of_the_same_size_and_pixels() -> None:
    pixels = bytes(range(2 * 3 * 3))  # 3 wide, 2 high
    png = ppm_to_png(_ppm(3, 2, pixels))
    assert png.startswith(PNG_SIGNATURE)
    assert png_size(png) == (3, 2)
    assert _png_pixels(png) == pixels


def test_sixteen_bit_and_small_maxval_samples_are_scaled_to_eight_bits() -> None:
    wide = struct.pack(">3H", 65535, 0, 32768)
    assert parse_ppm(_ppm(1, 1, wide, maxval=65535)) == (1, 1, bytes([255, 0, 127]))
    assert parse_ppm(_ppm(1, 1, bytes([15, 0, 1]), maxval=15)) == (1, 1, bytes([255, 0, 17]))


@pytest.mark.parametrize(
    "data",
    [
        b"P3\n1 1\n255\n0 0 0",
        b"P6\n1\n",
        b"P6\n0 1\n255\n",
        b"P6\n2 2\n255\n" + b"\0" * 5,
    ],
)
def test_a_broken_ppm_is_refused(data: bytes) -> None:
    with pytest.raises(ImageError):
        parse_ppm(data)


def test_a_png_with_a_damaged_header_is_refused() -> None:
    png = bytearray(ppm_to_png(_ppm(1, 1, b"\0\0\0")))
    png[20] ^= 0xFF
    with pytest.raises(ImageError):
        png_size(bytes(png))
    with pytest.raises(ImageError):
        png_size(b"GIF89a" + b"\0" * 40)


def test_the_rfb_greeting_is_read_and_answered_at_most_at_3_8() -> None:
    assert parse_rfb_version(b"RFB 003.008\n") == (3, 8)
    assert rfb_version_reply((3, 8)) == b"RFB 003.008\n"
    assert rfb_version_reply((3, 889)) == b"RFB 003.008\n"  # Apple's
    assert rfb_version_reply((3, 3)) == b"RFB 003.003\n"
    with pytest.raises(RfbError):
        parse_rfb_version(b"SSH-2.0-Open")


def test_server_init_gives_the_framebuffer_size_and_name() -> None:
    pixel_format = bytes(16)
    message = struct.pack(">HH", 720, 400) + pixel_format + struct.pack(">I", 4) + b"QEMU"
    assert parse_server_init(message) == ServerInit(720, 400, "QEMU")
    with pytest.raises(RfbError):
        parse_server_init(message[:10])
    with pytest.raises(RfbError):
        parse_server_init(message[:-1])


def test_a_screenshot_already_in_png_is_checked_and_passed_on() -> None:
    png = ppm_to_png(_ppm(2, 1, bytes(6)))
    assert screenshot_png(png) == png
    assert screenshot_png(_ppm(2, 1, bytes(6))) == png
    with pytest.raises(ImageError):
        screenshot_png(png[:20])
