"""The per-host call limiter: the concurrency cap, the token bucket, and the wait deadline."""

from __future__ import annotations

import threading
import time

import pytest

from libvirt_provider.driver.limits import CallLimiter, Limits
from libvirt_provider.errors import RetryableError
from tests.support.waiting import eventually


def test_never_more_calls_in_flight_than_the_cap() -> None:
    limiter = CallLimiter(Limits(qps=10_000, burst=10_000, max_concurrent=3), wait_deadline=10)
    inside = 0
    most = 0
    lock = threading.Lock()
    release = threading.Event()

    def call() -> None:
        nonlocal inside, most
        with limiter.call():
            with lock:
                inside += 1
                most = max(most, inside)
            release.wait(5)
            with lock:
                inside -= 1

    threads = [threading.Thread(target=call) for _ in range(12)]
    for t in threads:
        t.start()
    eventually(lambda: limiter.stats().in_flight == 3, timeout=5, what="three calls in flight")
    assert limiter.stats().in_flight == 3
    release.set()
    for t in threads:
        t.join(10)
    stats = limiter.stats()
    assert most == 3
    assert stats.peak_in_flight == 3
    assert stats.calls == 12
    assert stats.in_flight == 0


def test_a_call_that_finds_no_slot_in_time_fails_as_retryable() -> None:
    limiter = CallLimiter(Limits(qps=100, burst=100, max_concurrent=1), wait_deadline=0.2)
    with limiter.call():
        started = time.monotonic()
        with pytest.raises(RetryableError, match="busy"), limiter.call("libvirtd of host h1"):
            pass
        assert 0.15 <= time.monotonic() - started < 2
    assert limiter.stats().refused == 1


def test_the_bucket_allows_a_burst_then_the_rate() -> None:
    limiter = CallLimiter(Limits(qps=20, burst=5, max_concurrent=100), wait_deadline=10)
    started = time.monotonic()
    for _ in range(5):
        with limiter.call():
            pass
    burst_took = time.monotonic() - started
    for _ in range(10):
        with limiter.call():
            pass
    total = time.monotonic() - started
    # Ten calls beyond the burst at 20/s take about half a second.
    assert burst_took < 0.2
    assert 0.4 <= total < 3
    assert limiter.stats().peak_per_second <= 5 + 20 + 1


def test_new_limits_apply_to_waiting_calls() -> None:
    limiter = CallLimiter(Limits(qps=1000, burst=1000, max_concurrent=1), wait_deadline=5)
    entered = threading.Event()
    done = threading.Event()
    hold = threading.Event()

    def holder() -> None:
        with limiter.call():
            hold.wait(5)

    def waiter() -> None:
        with limiter.call():
            entered.set()
        done.set()

    first = threading.Thread(target=holder)
    first.start()
    eventually(lambda: limiter.stats().in_flight == 1, timeout=5, what="the holder's call")
    second = threading.Thread(target=waiter)
    second.start()
    assert not entered.wait(0.2)
    limiter.configure(Limits(qps=1000, burst=1000, max_concurrent=2))
    assert entered.wait(2)
    hold.set()
    first.join(5)
    second.join(5)
    assert done.is_set()
