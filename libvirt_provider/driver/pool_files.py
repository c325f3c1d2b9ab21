"""Writing a streamed volume straight into a directory pool's folder, on the daemon's own host.

libvirt's upload stream sends every byte through libvirtd's RPC, which on a small host costs more
CPU than the download and the checksum together (bench/image_bench.py). When the pool is a plain
directory that this process sees at the same path as libvirtd (the daemon runs on the host, the
DaemonSet mounts the pool folder), the bytes go to a file instead. The caller's read-and-hash loop
and the disk writes then run on two threads, and libvirt only rescans the pool.

The file is written under a temporary name, flushed to disk, then renamed into place, so a crash
never leaves a full-looking volume with missing data. A failed write removes its temporary file; one
left by a process that died mid-write carries this host's name and is removed by
`remove_stale_partials` when a daemon next starts using the folder.
"""

from __future__ import annotations

import contextlib
import glob
import os
import queue
import socket
import threading
from collections.abc import Iterable
from pathlib import Path

from libvirt_provider.errors import PermanentError

__all__ = ["partial_name", "remove_stale_partials", "write_into"]

# The host's name keeps daemons of several hosts sharing one pool folder off each other's files.
_PARTIAL_PREFIX = f"vmapi-upload-{socket.gethostname()}--"
_PARTIAL_SUFFIX = ".partial"
# Chunks in flight between the reader and the writer: enough to ride out a slow write, bounded so
# a stalled disk never lets the download pile up in memory.
_QUEUE_DEPTH = 8


def write_into(directory: Path, name: str, size: int, chunks: Iterable[bytes]) -> Path:
    """`directory/name` holding exactly the `size` bytes `chunks` yields, durable on return.

    Raises what `chunks` raises, OSError from the disk, or PermanentError when the byte count is
    not `size`; in every failure the partial file is gone."""
    final = directory / name
    partial = directory / partial_name(name)
    pending: queue.Queue[bytes | None] = queue.Queue(maxsize=_QUEUE_DEPTH)
    failure: list[BaseException] = []
    abandoned = threading.Event()

    def write() -> None:
        try:
            with partial.open("wb") as out:
                while (chunk := pending.get()) is not None:
                    if not abandoned.is_set():
                        out.write(chunk)
                if not abandoned.is_set():
                    out.flush()
                    os.fsync(out.fileno())
        except BaseException as err:  # handed to the reading thread, which raises it
            failure.append(err)
            abandoned.set()
            while pending.get() is not None:
                pass  # drain, so the reader never blocks on a full queue

    writer = threading.Thread(target=write, name=f"write-{name}", daemon=True)
    writer.start()
    received = 0
    try:
        try:
            for chunk in chunks:
                if abandoned.is_set():
                    break
                received += len(chunk)
                pending.put(chunk)
        except BaseException:
            abandoned.set()
            raise
        finally:
            pending.put(None)
            writer.join()
        if failure:
            raise failure[0]
        if received != size:
            raise PermanentError(f"{received} bytes arrived, {size} were announced")
        partial.replace(final)
        _sync_directory(directory)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    return final


def partial_name(name: str) -> str:
    """The temporary file `name` is written as until it is complete."""
    return f"{_PARTIAL_PREFIX}{name}{_PARTIAL_SUFFIX}"


def remove_stale_partials(directory: Path) -> list[str]:
    """Delete this host's temporary files in `directory`; only for use before any write starts."""
    removed = []
    for path in directory.glob(f"{glob.escape(_PARTIAL_PREFIX)}*{_PARTIAL_SUFFIX}"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path.name)
    return removed


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
