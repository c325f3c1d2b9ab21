"""Waiting for an observable effect with a deadline, the only way tests here wait."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.25,
    what: str = "condition",
) -> T:
    """Call `probe` until it returns a truthy value (returned) or the deadline passes (fails).

    A probe may also raise AssertionError to mean "not yet"; the last such error is reported when
    the deadline passes.
    """
    deadline = time.monotonic() + timeout
    last_error: AssertionError | None = None
    while True:
        try:
            result = probe()
            if result:
                return result
        except AssertionError as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f": {last_error}" if last_error else ""
            raise AssertionError(f"{what} not reached within {timeout:.0f} s{detail}")
        time.sleep(interval)
