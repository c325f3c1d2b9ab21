"""The C heap of a daemon with many threads: fewer malloc arenas, and freed memory handed back.

glibc gives threads that allocate at once arenas of their own, up to eight per core, and a freed
block stays in its arena: the daemon's threads (kopf's loop and executor, the work queues'
workers, watches, libvirt's event loop, the API client's pool) spread the same few megabytes over
many arenas, and a burst of machines created and deleted leaves RSS at its high-water mark for
good. Two arenas are enough for a process whose Python code holds the GIL anyway, and
`malloc_trim` returns the free pages at the top of every arena and the free whole pages inside
them. Measured with `bench/scale_bench.py` (docs/operations.md, "Memory").

On a C library without these calls (musl) both are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["Heap"]

log = logging.getLogger(__name__)

# mallopt(3): the parameter numbers of M_ARENA_MAX and M_MMAP_THRESHOLD.
_M_ARENA_MAX = -8
_M_MMAP_THRESHOLD = -3


class Heap:
    """glibc's malloc controls, when the process runs on glibc."""

    def __init__(self) -> None:
        self._libc: ctypes.CDLL | None = None
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name) if name else None
        except OSError:
            libc = None
        if libc is not None and hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim"):
            self._libc = libc

    @property
    def available(self) -> bool:
        return self._libc is not None

    def limit_arenas(self, arenas: int) -> bool:
        """At most `arenas` malloc arenas; call before threads start. False when not applied."""
        if self._libc is None:
            return False
        applied = bool(self._libc.mallopt(ctypes.c_int(_M_ARENA_MAX), ctypes.c_int(arenas)))
        if not applied:
            log.warning("could not limit malloc arenas to %d", arenas)
        return applied

    def fix_mmap_threshold(self, size: int) -> bool:
        """Blocks of `size` bytes and more always get pages of their own (mmap), handed back to
        the system when freed. glibc otherwise raises the threshold to the size of each such
        block freed, up to 32 MiB, so the megabyte-long bodies of a watch (a VM with thousands
        of labels) end up in the heap, scattered among small long-lived blocks that keep its
        pages. False when not applied."""
        if self._libc is None:
            return False
        applied = bool(self._libc.mallopt(ctypes.c_int(_M_MMAP_THRESHOLD), ctypes.c_int(size)))
        if not applied:
            log.warning("could not fix the mmap threshold at %d bytes", size)
        return applied

    def trim(self) -> bool:
        """Hand free heap memory back to the system; True when some was."""
        if self._libc is None:
            return False
        return bool(self._libc.malloc_trim(ctypes.c_size_t(0)))
