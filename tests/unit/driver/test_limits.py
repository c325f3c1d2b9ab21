"""The per-host call limiter: the concurrency cap, the token bucket, and the wait deadline."""

from __future__ import annotations

import threading

import pytest

from libvirt_provider.driver.limits import AgentGate, CallLimiter, Limits
from libvirt_provider.errors import AgentBusyError, RetryableError
from tests.support.waiting import eventually


class FakeTime:
    """The limiter's clock and its waits: a wait returns at once, the clock moved on by what it
    asked for, so a test sees how long each call waited without waiting."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    def wait(self, _condition: threading.Condition, seconds: float) -> bool:
        # A wait that cannot move the clock on would be asked for again and again.
        assert self.now + seconds > self.now, f"a wait of {seconds} s moves no clock on"
        self.waits.append(seconds)
        self.now += seconds
        return False


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
    fake = FakeTime()
    limiter = CallLimiter(
        Limits(qps=100, burst=100, max_concurrent=1),
        wait_deadline=0.2,
        clock=fake.clock,
        wait=fake.wait,
    )
    with limiter.call():
        with pytest.raises(RetryableError, match="busy"), limiter.call("libvirtd of host h1"):
            pass
        # It waited for the slot until the deadline, and no longer.
        assert fake.waits == [0.2]
        assert fake.now == 0.2
    assert limiter.stats().refused == 1


def test_the_bucket_allows_a_burst_then_the_rate() -> None:
    # 8 calls/s: a token every 0.125 s, which binary floating point holds exactly.
    fake = FakeTime()
    limiter = CallLimiter(
        Limits(qps=8, burst=5, max_concurrent=100),
        wait_deadline=10,
        clock=fake.clock,
        wait=fake.wait,
    )
    started: list[float] = []
    for _ in range(5):
        with limiter.call():
            started.append(fake.now)
    assert fake.waits == []  # the burst waits for nothing
    for _ in range(10):
        with limiter.call():
            started.append(fake.now)
    # Each call beyond the burst waited for its token: one eighth of a second, once.
    assert fake.waits == [0.125] * 10
    assert started == [0.0] * 5 + [0.125 * n for n in range(1, 11)]
    stats = limiter.stats()
    assert stats.longest_wait == 0.125
    # The busiest second, [0, 1): the burst and the seven calls at the rate after it.
    assert stats.peak_per_second == 5 + 7


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


# -- the guest-agent gate --------------------------------------------------------------------------


def test_agent_calls_have_a_few_slots_of_their_own_and_never_wait() -> None:
    gate = AgentGate(slots=2)
    with gate.call("a"), gate.call("b"):
        with pytest.raises(AgentBusyError, match="all 2 guest-agent call slots"), gate.call("c"):
            pass
        assert gate.stats().in_flight == 2
    with gate.call("c"):
        pass
    stats = gate.stats()
    assert (stats.calls, stats.in_flight, stats.peak_in_flight, stats.refused) == (3, 0, 2, 1)


def test_one_agent_call_per_machine_at_a_time() -> None:
    gate = AgentGate(slots=4)
    with gate.call("a"), pytest.raises(AgentBusyError, match="still in flight"), gate.call("a"):
        pass
    with gate.call("a"):
        pass


def test_a_failed_agent_call_gives_its_slot_back() -> None:
    gate = AgentGate(slots=1)
    with pytest.raises(RuntimeError), gate.call("a"):
        raise RuntimeError("the agent call failed")
    with gate.call("b"):
        pass
    assert gate.stats().in_flight == 0
