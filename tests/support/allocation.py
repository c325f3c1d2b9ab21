"""Asserting that a block of code never holds more than a bound of memory at once.

Tests of refusals that must happen before a huge value is built (a quantity such as 1e200000,
whose integer alone is 88 KB and takes seconds to build) measure what the code allocates instead
of how long it takes, which depends on the machine.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ALLOCATION_LIMIT", "allocating_at_most"]

# Far above what parsing a short text needs, far below what building a huge number takes.
ALLOCATION_LIMIT = 32 * 1024


@contextmanager
def allocating_at_most(limit: int) -> Iterator[None]:
    """Fails when the block's Python allocations ever held more than `limit` bytes at once."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= limit, f"allocated {peak} bytes at once, more than {limit}"
