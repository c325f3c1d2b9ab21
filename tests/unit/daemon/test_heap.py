"""The daemon's malloc controls work on the C library these machines and the image run (glibc)."""

from __future__ import annotations

import subprocess
import sys


def test_arenas_are_limited_and_freed_memory_is_handed_back() -> None:
    # In a child: the arena limit is process-wide and must not leak into the test session.
    script = """
import sys
from libvirt_provider.adapters.process.heap import Heap

def rss():
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0])

heap = Heap()
assert heap.available and heap.limit_arenas(2)
before = rss()
blocks = [bytearray(100_000) for _ in range(2_000)]  # about 200 MB, below the mmap threshold
del blocks[:-1]  # the last one pins the top of the heap: only a trim can free what is below
freed = heap.trim()
print(before, rss(), freed)
"""
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout.split()
    before, after, freed = int(out[0]), int(out[1]), out[2] == "True"
    assert freed
    assert after - before < 50_000, (before, after)
