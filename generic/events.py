"""Which Events to post and which to count: the same event on the same object is posted once.

A controller that fails the same way on every retry would otherwise post one Event per attempt,
burying `kubectl describe` and loading the API server (seen: thousands of `Defined` Events from a
create that kept failing). Like client-go's event correlator, a repeat of (object, type, reason,
message) within the window raises the first Event's count and last timestamp instead; after the
window, or once the API server has expired the first Event, the next one starts a new series.

Pure bookkeeping: the adapter (`generic.adapters.events`) does the posting.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["EventKey", "EventSeries", "SeriesStep"]

EventKey = tuple[str, str, str, str]
"""(uid of the involved object, type, reason, message)."""


@dataclass(frozen=True)
class SeriesStep:
    """What to do with one occurrence: post a new Event (name None), or count it on `name`."""

    name: str | None
    count: int


@dataclass
class _Series:
    name: str
    count: int
    started: float


class EventSeries:
    """Open series of Events, at most `capacity` of them (the oldest are dropped first)."""

    def __init__(
        self,
        *,
        window: float = 3600.0,
        capacity: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window = window
        self._capacity = capacity
        self._clock = clock
        self._open: OrderedDict[EventKey, _Series] = OrderedDict()

    def step(self, key: EventKey) -> SeriesStep:
        """Record one occurrence of `key` and say how to report it."""
        series = self._open.get(key)
        if series is None or self._clock() - series.started > self._window:
            self._open.pop(key, None)
            return SeriesStep(name=None, count=1)
        series.count += 1
        self._open.move_to_end(key)
        return SeriesStep(name=series.name, count=series.count)

    def started(self, key: EventKey, name: str) -> None:
        """The Event `name` was posted for `key`: later repeats are counted on it."""
        self._open[key] = _Series(name=name, count=1, started=self._clock())
        self._open.move_to_end(key)
        while len(self._open) > self._capacity:
            self._open.popitem(last=False)

    def lost(self, key: EventKey) -> None:
        """The Event of `key`'s series is gone (expired, deleted): the next repeat posts anew."""
        self._open.pop(key, None)

    def __len__(self) -> int:
        return len(self._open)
