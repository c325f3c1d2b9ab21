"""When to ask a machine's guest agent again after it stayed silent (pure: the clock is given).

The guest decides whether its agent answers. An agent that takes its channel and then stays silent
costs the agent's whole timeout on every call; asked on every pass (every half second while a NIC
waits for an address), a handful of such guests would keep the host's agent budget and the
machine controller's workers busy. So an agent that timed out is not asked again for a while,
doubling the pause at each further silence (10 s, 20 s, ... up to 5 min), per machine: the rest
of the host never waits for it. The first answer clears the record. While the agent is backed
off, the machine's addresses come from its network's other sources (lease, ARP) as for a guest
without an agent, and the machine says `guestAgent: unresponsive`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from libvirt_provider import constants as c

__all__ = [
    "AgentBackoff",
    "AgentHealth",
    "BackoffPolicy",
    "after_answer",
    "after_timeout",
    "may_ask",
]


@dataclass(frozen=True)
class BackoffPolicy:
    first: float = c.AGENT_BACKOFF_FIRST_SECONDS
    cap: float = c.AGENT_BACKOFF_MAX_SECONDS

    def pause(self, silences: int) -> float:
        """Seconds not to ask after `silences` timeouts in a row (1 or more)."""
        return float(min(self.cap, self.first * 2 ** max(0, silences - 1)))


@dataclass(frozen=True)
class AgentHealth:
    """One machine's agent: how many timeouts in a row, and when it may be asked again."""

    silences: int = 0
    retry_at: float = 0.0

    @property
    def unresponsive(self) -> bool:
        return self.silences > 0


def may_ask(health: AgentHealth, now: float) -> bool:
    return now >= health.retry_at


def after_timeout(health: AgentHealth, now: float, policy: BackoffPolicy) -> AgentHealth:
    silences = health.silences + 1
    return AgentHealth(silences=silences, retry_at=now + policy.pause(silences))


def after_answer(_health: AgentHealth) -> AgentHealth:
    return AgentHealth()


class AgentBackoff:
    """The records of one host's machines, by domain UUID (the reconcile workers share it)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        policy: BackoffPolicy | None = None,
    ) -> None:
        self._clock = clock
        self._policy = policy or BackoffPolicy()
        self._lock = threading.Lock()
        self._records: dict[str, AgentHealth] = {}

    def now(self) -> float:
        return self._clock()

    def health(self, uuid: str) -> AgentHealth:
        with self._lock:
            return self._records.get(uuid, AgentHealth())

    def may_ask(self, uuid: str) -> bool:
        return may_ask(self.health(uuid), self._clock())

    def timed_out(self, uuid: str) -> AgentHealth:
        """Record a silence; the new record (its `retry_at` says when to ask again)."""
        with self._lock:
            record = after_timeout(
                self._records.get(uuid, AgentHealth()), self._clock(), self._policy
            )
            self._records[uuid] = record
            return record

    def answered(self, uuid: str) -> bool:
        """Record an answer; True when the agent had been unresponsive until now."""
        with self._lock:
            before = self._records.pop(uuid, None)
        return before is not None and before.unresponsive

    def forget(self, uuid: str) -> None:
        """The domain stopped (a new boot, a new agent) or the machine is gone."""
        with self._lock:
            self._records.pop(uuid, None)
