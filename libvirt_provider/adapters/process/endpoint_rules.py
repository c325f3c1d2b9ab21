"""The health endpoint's rules, without I/O: who may hold a connection, and when readiness is
believed.

Why apart from the server (`health.py`): these are the endpoint's defence against anonymous
clients (it listens on the pod network for the kubelet, without authentication), and each rule is
tested with a clock and a peer address instead of sockets.

- `ConnectionBudget`: at most `max_connections` open connections, and at most `max_per_peer`
  from one address, so one client flooding the port (idle connections, a slowloris) can neither
  exhaust the process nor take every slot from the kubelet, which probes from another address.
  A connection over either bound is closed at once.
- `ReadinessCache`: `/readyz` answers the verdict the readiness loop last recorded, never runs a
  check itself, and a verdict older than `max_age` (a loop stuck in a check, or dead) is a
  failure of its own rather than an old "ok".
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "READINESS_CHECKS_SECONDS",
    "ConnectionBudget",
    "EndpointLimits",
    "ReadinessAnswer",
    "ReadinessCache",
    "readiness_max_age",
]

Problem = tuple[str, str]
"""A failing check: its name, and what is wrong."""


@dataclass(frozen=True)
class EndpointLimits:
    """What one client may cost the endpoint."""

    # Open connections at once, all clients together: each holds a thread while it is served.
    max_connections: int = 64
    # Open connections at once from one address: the kubelet probes from its node's address, so
    # a flood from anywhere else leaves it room.
    max_per_peer: int = 8
    # Seconds one read may wait for the client's next bytes, and one answer for the client to
    # take it.
    io_timeout: float = 5.0
    # Seconds from accepting a connection to having read its whole request, however the bytes
    # trickle in (a client sending one byte every `io_timeout` would otherwise be kept for ever).
    request_deadline: float = 10.0


class ConnectionBudget:
    """Admission of connections under `EndpointLimits`: `admit` when one is accepted (False:
    close it now), `release` when it is closed. Thread-safe."""

    def __init__(self, *, max_connections: int, max_per_peer: int) -> None:
        self._max = max_connections
        self._max_per_peer = max_per_peer
        self._lock = threading.Lock()
        self._open: Counter[str] = Counter()

    def admit(self, peer: str) -> bool:
        with self._lock:
            if sum(self._open.values()) >= self._max or self._open[peer] >= self._max_per_peer:
                return False
            self._open[peer] += 1
            return True

    def release(self, peer: str) -> None:
        with self._lock:
            self._open[peer] -= 1
            if self._open[peer] <= 0:
                del self._open[peer]

    def open(self) -> int:
        with self._lock:
            return sum(self._open.values())


@dataclass(frozen=True)
class ReadinessAnswer:
    problems: tuple[Problem, ...]
    # Seconds since the verdict was recorded; None before the first one.
    age: float | None


# The readiness checks' own bounds, run one after the other: libvirtd 3 s, the API server 7 s.
READINESS_CHECKS_SECONDS = 10.0


def readiness_max_age(interval: float) -> float:
    """The age past which the readiness checks' last verdict is not believed, for checks run
    every `interval` seconds: one interval, the checks' bounds, and as much again as the bounds
    for a loaded machine, so only a loop that is stuck or gone reaches it (30 s at 10 s)."""
    return interval + 2 * READINESS_CHECKS_SECONDS


class ReadinessCache:
    """The readiness checks' last verdict, and the rule for trusting it: none yet, or one older
    than `max_age`, is not ready."""

    def __init__(self, *, max_age: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._problems: tuple[Problem, ...] = ()
        self._at: float | None = None

    def record(self, problems: Sequence[Problem]) -> None:
        with self._lock:
            self._problems = tuple(problems)
            self._at = self._clock()

    def answer(self) -> ReadinessAnswer:
        with self._lock:
            problems, at = self._problems, self._at
        if at is None:
            return ReadinessAnswer((("readiness", "not checked yet"),), None)
        age = max(0.0, self._clock() - at)
        if age > self._max_age:
            stale = (
                "readiness",
                f"last checked {age:.0f} s ago, more than {self._max_age:.0f} s: the checks "
                "are stuck",
            )
            return ReadinessAnswer((*problems, stale), age)
        return ReadinessAnswer(problems, age)
