"""What the lab benchmarks share for reporting and waiting: percentiles, a figures line, a
deadline-bounded wait that ends the script (tests/support/waiting.py's, with a bench's message),
and whether a fleet's generic controller has a leader.

The leading underscore keeps it out of the list of bench scripts that must have a smoke mode.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any, TypeVar

from tests.support.waiting import TimedOutError, eventually

T = TypeVar("T")

__all__ = ["figures", "leads", "p95", "wait"]


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[18] if len(values) >= 20 else max(values)


def figures(values: list[float]) -> str:
    """p50, p95 and max of durations in seconds, in milliseconds."""
    return (
        f"p50 {statistics.median(values) * 1e3:6.0f} ms, p95 {p95(values) * 1e3:6.0f} ms, "
        f"max {max(values) * 1e3:6.0f} ms"
    )


def wait(probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.2) -> T:
    """Until `probe()` is true (its value returned); the script ends with a message after
    `timeout` seconds. An exception from the probe ends it at once."""
    try:
        return eventually(probe, timeout=timeout, interval=interval, what=what, not_yet=())
    except TimedOutError:
        raise SystemExit(f"bench: {what} not reached within {timeout:.0f} s") from None


def leads(fleet: Any) -> bool:
    """Whether one of the fleet's daemons holds the generic controller's Lease."""
    try:
        return bool(fleet.leader())
    except Exception:
        return False
