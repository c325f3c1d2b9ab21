"""Minimal qcow2 images as bytes, built field by field for the header checks' tests."""

from __future__ import annotations

import struct

DATA_FILE_EXTENSION = 0x44415441


def qcow2_image(
    *,
    version: int = 3,
    backing: bool = False,
    data_file_bit: bool = False,
    data_file_extension: bool = False,
    size: int = 16 * 1024,
) -> bytes:
    """A qcow2 header (and zero padding up to `size`): version 2 or 3, with the header fields that
    name other files set as asked."""
    header = bytearray(104 if version >= 3 else 72)
    struct.pack_into(">4sIQ", header, 0, b"QFI\xfb", version, 4096 if backing else 0)
    if version >= 3:
        struct.pack_into(">Q", header, 72, 1 << 2 if data_file_bit else 0)
        struct.pack_into(">I", header, 100, 104)
        name = b"/var/lib/secret.raw"
        if data_file_extension:
            header += struct.pack(">II", DATA_FILE_EXTENSION, len(name))
            header += name + b"\0" * (-len(name) % 8)
        header += struct.pack(">II", 0, 0)
    return bytes(header) + b"\0" * (size - len(header))
