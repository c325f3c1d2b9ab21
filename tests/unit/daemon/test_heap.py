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


def _rss_after_big_blocks(*, fixed: bool) -> int:
    """KiB of RSS still held after 40 blocks of 1.2 MB (a watch event of a VM with 40,000
    labels), each followed by a small long-lived one, were freed."""
    script = f"""
from libvirt_provider.adapters.process.heap import Heap

def rss():
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0])

heap = Heap()
assert heap.available
if {fixed}:
    assert heap.fix_mmap_threshold(256 * 1024)
first = bytearray(2_000_000)
del first  # glibc raises its threshold past the size of a mapped block freed
before = rss()
pins, blocks = [], []
for _ in range(40):
    blocks.append(bytearray(1_200_000))
    pins.append(bytearray(100_000))
del blocks
print(rss() - before)
"""
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout
    return int(out)


def test_big_blocks_are_handed_back_as_soon_as_they_are_freed() -> None:
    held_dynamic = _rss_after_big_blocks(fixed=False)
    held_fixed = _rss_after_big_blocks(fixed=True)
    # 40 x 100 kB of small blocks stay either way; the 48 MB of big ones only without the fix.
    assert held_dynamic > 40_000, held_dynamic
    assert held_fixed < 10_000, held_fixed
