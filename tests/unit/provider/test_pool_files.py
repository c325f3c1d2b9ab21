"""Streaming a volume into a pool folder: all of it, durable, or nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from libvirt_provider.driver.pool_files import partial_name, remove_stale_partials, write_into
from libvirt_provider.errors import PermanentError


def _chunks(data: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def test_the_bytes_arrive_whole_under_the_final_name(tmp_path: Path) -> None:
    data = bytes(range(256)) * 1000
    path = write_into(tmp_path, "base.qcow2", len(data), _chunks(data, 999))
    assert path == tmp_path / "base.qcow2"
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.qcow2"]


@pytest.mark.parametrize("announced", [10, 12])
def test_a_wrong_byte_count_leaves_nothing(tmp_path: Path, announced: int) -> None:
    with pytest.raises(PermanentError, match="11 bytes arrived"):
        write_into(tmp_path, "base.qcow2", announced, iter([b"hello", b" world"]))
    assert list(tmp_path.iterdir()) == []


def test_a_failing_download_leaves_nothing(tmp_path: Path) -> None:
    def broken() -> Iterator[bytes]:
        yield b"x" * 100
        raise OSError("connection reset")

    with pytest.raises(OSError, match="connection reset"):
        write_into(tmp_path, "base.qcow2", 1000, broken())
    assert list(tmp_path.iterdir()) == []


def test_a_failing_disk_stops_the_reader_and_leaves_nothing(tmp_path: Path) -> None:
    read = 0

    def endless() -> Iterator[bytes]:
        nonlocal read
        while True:
            read += 1
            yield b"y" * 1024

    (tmp_path / partial_name("base.qcow2")).mkdir()  # opening it for writing fails
    with pytest.raises(IsADirectoryError):
        write_into(tmp_path, "base.qcow2", 10**12, endless())
    assert read < 1000
    assert not (tmp_path / "base.qcow2").exists()


def test_only_this_hosts_leftovers_are_removed(tmp_path: Path) -> None:
    mine = tmp_path / partial_name("image-a.qcow2")
    mine.write_bytes(b"half")
    others = [tmp_path / "vmapi-upload-otherhost--image-a.qcow2.partial", tmp_path / "x.partial"]
    for path in others:
        path.write_bytes(b"theirs")
    assert remove_stale_partials(tmp_path) == [mine.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in others)
