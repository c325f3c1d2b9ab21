"""Event series (repeats counted, not re-posted) and the Lease rule of leader election."""

from __future__ import annotations

import datetime as dt

from generic.events import EventSeries
from generic.lease import LeaseRecord, may_hold


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


KEY = ("uid-1", "Warning", "ProviderError", "start failed")


def test_a_repeated_event_is_counted_on_the_first() -> None:
    series = EventSeries(clock=Clock())
    assert series.step(KEY).name is None
    series.started(KEY, "web.1")
    steps = [series.step(KEY) for _ in range(3)]
    assert [(s.name, s.count) for s in steps] == [("web.1", 2), ("web.1", 3), ("web.1", 4)]


def test_another_message_or_object_starts_its_own_series() -> None:
    series = EventSeries(clock=Clock())
    series.started(KEY, "web.1")
    assert series.step(("uid-1", "Warning", "ProviderError", "other")).name is None
    assert series.step(("uid-2", *KEY[1:])).name is None


def test_a_series_ends_after_its_window_or_when_its_event_is_lost() -> None:
    clock = Clock()
    series = EventSeries(window=60, clock=clock)
    series.started(KEY, "web.1")
    clock.now = 61
    assert series.step(KEY).name is None
    series.started(KEY, "web.2")
    series.lost(KEY)
    assert series.step(KEY).name is None


def test_the_series_table_is_bounded() -> None:
    series = EventSeries(capacity=3, clock=Clock())
    for i in range(10):
        series.started((str(i), "Normal", "R", "m"), f"e{i}")
    assert len(series) == 3
    assert series.step(("0", "Normal", "R", "m")).name is None
    assert series.step(("9", "Normal", "R", "m")).name == "e9"


NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


def test_a_free_or_own_lease_may_be_held() -> None:
    assert may_hold(None, identity="a", now=NOW)
    assert may_hold(
        LeaseRecord(holder=None, renewed=NOW, duration_seconds=15), identity="a", now=NOW
    )
    assert may_hold(
        LeaseRecord(holder="a", renewed=NOW, duration_seconds=15), identity="a", now=NOW
    )


def test_another_holders_lease_is_taken_only_once_expired() -> None:
    record = LeaseRecord(holder="b", renewed=NOW, duration_seconds=15)
    assert not may_hold(record, identity="a", now=NOW + dt.timedelta(seconds=14))
    assert may_hold(record, identity="a", now=NOW + dt.timedelta(seconds=15))
