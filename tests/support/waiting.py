"""Waiting for an observable effect with a deadline: the one wait loop of tests/, bench/, the lab.

Why a module of its own: a wait written out by hand drifts (one checks the deadline before the
probe, another after; one forgets the last error, another sleeps past the deadline), and a fixed
sleep is either too short on a busy machine or wastes time on an idle one. Every wait in the tests,
the benchmarks and `tests/lab/lab.py` goes through `eventually`.

Standard library only: `tests/lab/lab.py` runs before the virtualenv exists and imports this.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["GiveUp", "TimedOutError", "eventually"]


class TimedOutError(AssertionError):
    """The deadline passed before the probe answered; `last_error` is its last "not yet" error.

    An AssertionError, so that a test that times out fails as an assertion does, and a wait nested
    in another wait's probe counts as that probe's "not yet".
    """

    def __init__(self, what: str, timeout: float, last_error: BaseException | None = None) -> None:
        detail = f": {last_error}" if last_error else ""
        super().__init__(f"{what} not reached within {timeout:.0f} s{detail}")
        self.what, self.timeout, self.last_error = what, timeout, last_error


class GiveUp(Exception):  # noqa: N818 - what a probe says, not an error condition's name
    """Raised by a probe to end the wait at once: waiting longer cannot help (the process under
    test exited, the output ended). `eventually` lets it through to the caller."""


def eventually(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.25,
    what: str = "condition",
    not_yet: tuple[type[BaseException], ...] = (AssertionError,),
    pause: Callable[[float], object] = time.sleep,
) -> T:
    """Call `probe` until it returns a truthy value (returned) or the deadline passes (raises
    TimedOutError).

    A probe may also raise one of `not_yet` (AssertionError unless told) to mean "not yet"; the
    last such error is reported when the deadline passes. Any other exception, GiveUp included,
    ends the wait and reaches the caller. Between probes the wait pauses `interval` seconds through
    `pause`: `time.sleep`, or an Event's `wait` so that a change wakes it early.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = probe()
            if result:
                return result
        except not_yet as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise TimedOutError(what, timeout, last_error)
        pause(interval)
