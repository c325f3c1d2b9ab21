"""Client-side bounds on the calls one daemon makes to one host's libvirtd.

Why: a burst of machines turns into a burst of libvirt calls, and a remote libvirtd (over SSH
especially) serves each connection's calls one RPC at a time per worker; unbounded, the calls queue
inside libvirt where no deadline applies. Two bounds, as in client-go: a token bucket (`qps`
average, `burst` at once) and a cap on calls in flight. Both are waited for with a deadline: a
call that cannot start in time fails as retryable ("host busy"), it never waits for ever.

The figures a benchmark needs (peak calls in flight, calls in the busiest second) are kept here,
since this is the one place every call passes.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from libvirt_provider import constants as c
from libvirt_provider.errors import AgentBusyError, RetryableError

__all__ = ["AgentGate", "AgentGateStats", "CallLimiter", "LimiterStats", "Limits"]


@dataclass(frozen=True)
class Limits:
    qps: float = c.DEFAULT_HOST_QPS
    burst: int = c.DEFAULT_HOST_BURST
    max_concurrent: int = c.DEFAULT_MAX_CONCURRENT_OPERATIONS


@dataclass(frozen=True)
class LimiterStats:
    limits: Limits
    calls: int
    in_flight: int
    peak_in_flight: int
    # Most calls started within any one second (sliding), since the last reset.
    peak_per_second: int
    # Longest wait for a token and a slot, seconds.
    longest_wait: float
    refused: int


class CallLimiter:
    """A token bucket and a concurrency cap; `limits` may change at any time.

    Time is `clock` and a wait is `wait(condition, seconds)`, the limiter's lock held as with
    `Condition.wait`: tests pass a fake clock that their `wait` moves on, and see exactly how long
    each call waited without waiting.
    """

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        wait_deadline: float = c.CALL_WAIT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[threading.Condition, float], object] = threading.Condition.wait,
    ) -> None:
        self._limits = limits or Limits()
        self._deadline = wait_deadline
        self._clock = clock
        self._wait = wait
        self._cond = threading.Condition()
        self._tokens = float(self._limits.burst)
        self._refilled = clock()
        self._in_flight = 0
        self._calls = 0
        self._peak = 0
        self._recent: deque[float] = deque()
        self._peak_second = 0
        self._longest_wait = 0.0
        self._refused = 0

    @property
    def limits(self) -> Limits:
        return self._limits

    def configure(self, limits: Limits) -> None:
        with self._cond:
            if limits == self._limits:
                return
            self._refill()
            self._limits = limits
            self._tokens = min(self._tokens, float(limits.burst))
            self._cond.notify_all()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(
            float(self._limits.burst), self._tokens + (now - self._refilled) * self._limits.qps
        )
        self._refilled = now

    @contextmanager
    def call(self, what: str = "libvirt") -> Iterator[None]:
        """Hold a token and a slot for one call; `RetryableError` when neither comes in time."""
        start = self._clock()
        end = start + self._deadline
        with self._cond:
            while True:
                self._refill()
                if self._in_flight < self._limits.max_concurrent and self._tokens >= 1.0:
                    break
                left = end - self._clock()
                if left <= 0:
                    self._refused += 1
                    raise RetryableError(
                        f"{what} is busy: no call slot within {self._deadline:g} s "
                        f"(limits: {self._limits.qps:g} calls/s, burst {self._limits.burst}, "
                        f"{self._limits.max_concurrent} at once)"
                    )
                if self._in_flight >= self._limits.max_concurrent:
                    self._wait(self._cond, left)
                else:
                    self._wait(self._cond, min(left, (1.0 - self._tokens) / self._limits.qps))
            self._tokens -= 1.0
            self._in_flight += 1
            self._calls += 1
            self._peak = max(self._peak, self._in_flight)
            now = self._clock()
            self._longest_wait = max(self._longest_wait, now - start)
            self._recent.append(now)
            while self._recent and self._recent[0] <= now - 1.0:
                self._recent.popleft()
            self._peak_second = max(self._peak_second, len(self._recent))
        try:
            yield
        finally:
            with self._cond:
                self._in_flight -= 1
                self._cond.notify_all()

    def stats(self, *, reset: bool = False) -> LimiterStats:
        with self._cond:
            stats = LimiterStats(
                limits=self._limits,
                calls=self._calls,
                in_flight=self._in_flight,
                peak_in_flight=self._peak,
                peak_per_second=self._peak_second,
                longest_wait=self._longest_wait,
                refused=self._refused,
            )
            if reset:
                self._peak = self._in_flight
                self._peak_second = 0
                self._longest_wait = 0.0
            return stats


@dataclass(frozen=True)
class AgentGateStats:
    slots: int
    calls: int
    in_flight: int
    peak_in_flight: int
    refused: int


class AgentGate:
    """The guest-agent calls of one host: at most `slots` at once, and one per machine.

    Why apart from the `CallLimiter`: a guest answers its agent channel when it likes, so an agent
    call may last its whole timeout; on the general slots, a few silent guests would hold every
    slot and starve every other tenant's calls. An agent call is never waited for: when the
    budget or the machine's own call is taken, `AgentBusyError` says so at once, and the caller
    goes on without the agent's answer this time (libvirt would queue a second call to the same
    agent behind the first anyway).
    """

    def __init__(self, slots: int = c.AGENT_CALLS_PER_HOST) -> None:
        self._slots = slots
        self._lock = threading.Lock()
        self._busy: set[str] = set()
        self._calls = 0
        self._peak = 0
        self._refused = 0

    @contextmanager
    def call(self, key: str, what: str = "guest agent") -> Iterator[None]:
        """Hold the machine `key`'s agent call and one of the host's agent slots."""
        with self._lock:
            if key in self._busy:
                self._refused += 1
                raise AgentBusyError(f"{what}: a call to this guest's agent is still in flight")
            if len(self._busy) >= self._slots:
                self._refused += 1
                raise AgentBusyError(
                    f"{what}: all {self._slots} guest-agent call slots of the host are in use"
                )
            self._busy.add(key)
            self._calls += 1
            self._peak = max(self._peak, len(self._busy))
        try:
            yield
        finally:
            with self._lock:
                self._busy.discard(key)

    def stats(self) -> AgentGateStats:
        with self._lock:
            return AgentGateStats(
                slots=self._slots,
                calls=self._calls,
                in_flight=len(self._busy),
                peak_in_flight=self._peak,
                refused=self._refused,
            )
