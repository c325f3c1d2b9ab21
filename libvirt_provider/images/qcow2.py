"""What a qcow2 header says about files outside the image, read from the first bytes of a download.

A qcow2 image can name other host files in its header: a backing file (read for every cluster the
image does not hold) and, since qcow2 version 3, an external data file (where all guest data
lives). Either would make qemu open a path the image's author chose, on the host, for every
machine layered on the image. An imported image must stand alone, so both are refused before the
image is marked verified. The check reads the header itself rather than asking libvirt or
qemu-img, so it needs no access to the pool's files (a remote host's pool included) and runs on
the bytes as they stream in.

Layout (QEMU's docs/interop/qcow2.txt): a big-endian header with the magic `QFI\\xfb`, the version
at byte 4, the backing file's offset (8 bytes) at byte 8; version 3 adds the incompatible feature
bits at byte 72 (bit 2: external data file) and the header length at byte 100, after which come
header extensions, type `0x44415441` naming the data file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["HEADER_BYTES", "Qcow2Header", "header_problem", "read_header"]

MAGIC = b"QFI\xfb"
# Enough for the header and every extension: they must fit in the first cluster, and the smallest
# cluster qcow2 allows is 512 bytes while the usual is 64 KiB. A header that needs more than this
# is refused as unreadable.
HEADER_BYTES = 64 * 1024
_EXTERNAL_DATA_FILE_BIT = 1 << 2
_EXT_END = 0x00000000
_EXT_DATA_FILE = 0x44415441
_MAX_EXTENSIONS = 64


@dataclass(frozen=True)
class Qcow2Header:
    version: int
    backing_file: bool
    external_data_file: bool


def read_header(data: bytes) -> Qcow2Header | None:
    """The header facts, or None when `data` does not start like a qcow2 image.

    Raises ValueError when it starts like one but the header cannot be read within `data`.
    """
    if len(data) < 4 or data[:4] != MAGIC:
        return None
    if len(data) < 72:
        raise ValueError("the qcow2 header is truncated")
    version, backing_offset = struct.unpack_from(">IQ", data, 4)
    if version < 2:
        raise ValueError(f"qcow2 version {version} is not supported")
    if version == 2:
        return Qcow2Header(version, backing_file=backing_offset != 0, external_data_file=False)
    if len(data) < 104:
        raise ValueError("the qcow2 version 3 header is truncated")
    (incompatible,) = struct.unpack_from(">Q", data, 72)
    (header_length,) = struct.unpack_from(">I", data, 100)
    data_file = bool(incompatible & _EXTERNAL_DATA_FILE_BIT) or _names_data_file(
        data, header_length
    )
    return Qcow2Header(version, backing_file=backing_offset != 0, external_data_file=data_file)


def _names_data_file(data: bytes, offset: int) -> bool:
    if offset < 104 or offset > len(data):
        raise ValueError(f"the qcow2 header length {offset} is out of range")
    for _ in range(_MAX_EXTENSIONS):
        if offset + 8 > len(data):
            raise ValueError("the qcow2 header extensions run past the first 64 KiB")
        kind, length = struct.unpack_from(">II", data, offset)
        if kind == _EXT_END:
            return False
        if kind == _EXT_DATA_FILE:
            return True
        offset += 8 + (length + 7) // 8 * 8  # each extension is padded to 8 bytes
    raise ValueError(f"the qcow2 header has more than {_MAX_EXTENSIONS} extensions")


def header_problem(data: bytes) -> str | None:
    """Why an image whose first bytes are `data`, declared qcow2, must not be used; or None."""
    try:
        header = read_header(data)
    except ValueError as err:
        return str(err)
    if header is None:
        return "it is not a qcow2 image (no qcow2 magic at its start)"
    if header.backing_file:
        return "its qcow2 header names a backing file"
    if header.external_data_file:
        return "its qcow2 header names an external data file"
    return None
