"""The qcow2 header check: images that name other host files are told apart from ones that don't.

Images made by qemu-img (in the lab, the guest images) pass the same check in the e2e suite.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libvirt_provider.images import qcow2
from libvirt_provider.images.qcow2 import HEADER_BYTES, header_problem, read_header
from tests.unit.images.qcow2_bytes import qcow2_image


@pytest.mark.parametrize("version", [2, 3])
def test_a_plain_image_passes(version: int) -> None:
    assert header_problem(qcow2_image(version=version)) is None


@pytest.mark.parametrize("version", [2, 3])
def test_a_backing_file_is_refused(version: int) -> None:
    assert header_problem(qcow2_image(version=version, backing=True)) == (
        "its qcow2 header names a backing file"
    )


@pytest.mark.parametrize(
    "image",
    [qcow2_image(data_file_bit=True), qcow2_image(data_file_extension=True)],
    ids=["feature-bit", "extension"],
)
def test_an_external_data_file_is_refused(image: bytes) -> None:
    assert header_problem(image) == "its qcow2 header names an external data file"


def test_bytes_that_are_not_qcow2_are_named_so() -> None:
    assert read_header(b"\0" * 512) is None
    assert "not a qcow2 image" in str(header_problem(b"ISO9660" + b"\0" * 100))


def test_a_truncated_or_endless_header_is_refused() -> None:
    assert "truncated" in str(header_problem(qcow2_image()[:80]))
    endless = bytearray(qcow2_image())
    # Extension headers that never end: each claims 0 bytes of a non-zero type.
    for offset in range(104, HEADER_BYTES, 8):
        endless[offset : offset + 8] = b"\0\0\0\x01\0\0\0\0"
    assert "extensions" in str(header_problem(bytes(endless)))


class CountedReads:
    """`struct` as the header check sees it, counting the fields it reads."""

    def __init__(self) -> None:
        self.reads = 0

    def unpack_from(self, fmt: str, buffer: bytes, offset: int = 0) -> tuple[Any, ...]:
        self.reads += 1
        return struct.unpack_from(fmt, buffer, offset)


# At most: the version and backing offset, the feature bits, the header length, and one
# extension header for each extension allowed. Counted, not timed: an answer after a bounded
# number of reads is what "quickly" means here, whatever the machine's speed.
MOST_READS = 3 + qcow2._MAX_EXTENSIONS


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=2048), st.integers(min_value=0, max_value=200))
def test_any_bytes_after_the_magic_give_an_answer_quickly(tail: bytes, cut: int) -> None:
    data = (qcow2_image()[:cut] + tail)[:HEADER_BYTES]
    counted = CountedReads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(qcow2, "struct", counted)
        answer = header_problem(b"QFI\xfb" + data[4:] if len(data) >= 4 else data)
    assert answer is None or isinstance(answer, str)
    assert counted.reads <= MOST_READS


def test_extensions_that_never_end_are_given_up_after_the_most_reads() -> None:
    # Each extension header claims 0 bytes of a non-zero type: the walk could go on to 64 KiB.
    endless = bytearray(qcow2_image(size=HEADER_BYTES))
    for offset in range(104, HEADER_BYTES, 8):
        endless[offset : offset + 8] = b"\0\0\0\x01\0\0\0\0"
    counted = CountedReads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(qcow2, "struct", counted)
        assert "extensions" in str(header_problem(bytes(endless)))
    assert counted.reads == MOST_READS
