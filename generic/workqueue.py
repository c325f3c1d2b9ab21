"""A deduplicating work queue with per-key backoff, and the bounded thread pool that drains it.

Why not reconcile inside kopf's handlers: kopf's event handlers are not retried, its retrying
handlers keep progress in annotations and a finalizer of its own (which an embedding process
shares with its other controllers), and the Kubernetes client blocks. So handlers only add keys
here; a fixed number of worker threads reconcile them, one key at a time per key (a key added
while it is being processed is processed again afterwards, never concurrently), with
exponential backoff for failures and timed re-checks for kinds that are not watched.

A key has at most one pending wake-up: a timed add keeps the earlier of the two times, and handing
a key out drops its pending one, since the pass that runs decides afresh when to look again.
Without that, every event would start a timer chain of its own that never merges with the others.
Backoff delays carry jitter, so keys that failed together (libvirtd restarting) do not all come
back in the same instant.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Outcome", "WorkQueue", "WorkerPool"]

K = TypeVar("K", bound=Hashable)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """What the work queue should do with a key after one pass over it."""

    retry: bool = False
    """Back off and try again (exponentially, per key)."""
    requeue_after: float | None = None
    """Look again after this many seconds, independent of events."""
    immediately: bool = False
    """Look again now (an optimistic-concurrency conflict)."""


class WorkQueue(Generic[K]):
    """Keys waiting to be processed; the same key is never handed out twice at once."""

    def __init__(
        self,
        *,
        base_delay: float = 0.5,
        max_delay: float = 300.0,
        jitter: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._base = base_delay
        self._max = max_delay
        self._jitter = jitter
        self._clock = clock
        self._rng = rng
        self._lock = threading.Condition()
        self._ready: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._delayed: list[tuple[float, int, K, int | None]] = []
        # The one pending wake-up per key, as (due, seq); heap entries not named here are stale.
        self._pending: dict[K, tuple[float, int]] = {}
        self._seq = itertools.count()
        self._failures: dict[K, int] = {}
        self._retry_epoch: dict[K, int] = {}
        self._closed = False

    def add(self, key: K) -> None:
        with self._lock:
            self._add_locked(key)

    def _add_locked(self, key: K) -> None:
        if self._closed or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._ready.append(key)
            self._lock.notify()

    def add_after(self, key: K, delay: float) -> None:
        """Add `key` once `delay` seconds have passed."""
        self._add_after(key, delay, epoch=None)

    def _add_after(self, key: K, delay: float, *, epoch: int | None) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._lock:
            if self._closed:
                return
            due = self._clock() + delay
            pending = self._pending.get(key)
            if pending is not None and pending[0] <= due:
                return
            seq = next(self._seq)
            self._pending[key] = (due, seq)
            heapq.heappush(self._delayed, (due, seq, key, epoch))
            self._lock.notify()

    def add_rate_limited(self, key: K) -> float:
        """Add `key` after its backoff delay (doubling per consecutive failure, up to the cap,
        with jitter of +/- the jitter fraction); returns the delay."""
        with self._lock:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
            epoch = self._retry_epoch.get(key, 0)
        delay: float = min(self._base * 2.0 ** min(failures, 64), self._max)
        delay *= 1.0 + self._jitter * (2.0 * self._rng() - 1.0)
        self._add_after(key, delay, epoch=epoch)
        return delay

    def settle(self, key: K, outcome: Outcome) -> None:
        """Schedule `key` as a pass's `outcome` asks."""
        if outcome.immediately:
            self.add(key)
        elif outcome.retry:
            self.add_rate_limited(key)
        else:
            self.forget(key)
            if outcome.requeue_after is not None:
                self.add_after(key, outcome.requeue_after)

    def forget(self, key: K) -> None:
        """Reset the backoff of `key` (it succeeded) and drop the retries still pending for it.

        Without the latter, every success after a failure would be followed by one pointless
        pass when the old retry comes due.
        """
        with self._lock:
            if self._failures.pop(key, None) is not None:
                self._retry_epoch[key] = self._retry_epoch.get(key, 0) + 1
                self._pending.pop(key, None)

    def next_due(self) -> float | None:
        """The clock time of the earliest pending wake-up, if any."""
        with self._lock:
            return min((due for due, _ in self._pending.values()), default=None)

    def failures(self, key: K) -> int:
        """Consecutive failures of `key` since it last succeeded."""
        with self._lock:
            return self._failures.get(key, 0)

    def get(self, timeout: float | None = None) -> K | None:
        """The next key to process, or None on shutdown or when `timeout` passes."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._lock:
            while True:
                self._promote_due_locked()
                if self._closed:
                    return None
                if self._ready:
                    key = self._ready.popleft()
                    self._dirty.discard(key)
                    self._pending.pop(key, None)
                    self._processing.add(key)
                    return key
                wait = self._delayed[0][0] - self._clock() if self._delayed else None
                if deadline is not None:
                    left = deadline - self._clock()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._lock.wait(wait)

    def _promote_due_locked(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            due, seq, key, epoch = heapq.heappop(self._delayed)
            if self._pending.get(key) != (due, seq):
                continue
            del self._pending[key]
            if epoch is None or epoch == self._retry_epoch.get(key, 0):
                self._add_locked(key)

    def done(self, key: K) -> None:
        """Processing of `key` finished; if it was added meanwhile, it becomes ready again."""
        with self._lock:
            self._processing.discard(key)
            if key in self._dirty and not self._closed:
                self._ready.append(key)
                self._lock.notify()

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    def __len__(self) -> int:
        with self._lock:
            return len(self._ready) + len(self._pending)


class WorkerPool(Generic[K]):
    """A fixed number of threads that process keys from a `WorkQueue`.

    It can be stopped and started again (an embedding process that gains and loses leadership);
    stopping leaves the queue open, so keys added meanwhile wait for the next start.
    """

    def __init__(
        self,
        queue: WorkQueue[K],
        process: Callable[[K], None],
        *,
        workers: int,
        name: str = "generic-worker",
        poll: float = 0.5,
    ) -> None:
        self._queue = queue
        self._process = process
        self._workers = workers
        self._name = name
        self._poll = poll
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        if self._threads:
            return
        self._stopping.clear()
        self._threads = [
            threading.Thread(target=self._run, name=f"{self._name}-{i}", daemon=True)
            for i in range(self._workers)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 10.0) -> bool:
        """Let the workers finish their current key and exit, waiting `timeout` seconds in all
        (not per worker: a daemon's stop must stay within its grace period however many workers
        are busy). False when a worker was still busy at the end; it exits after its key."""
        self._stopping.set()
        end = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, end - time.monotonic()))
        busy = [t.name for t in self._threads if t.is_alive()]
        self._threads = []
        if busy:
            log.warning("stopping: %s still busy after %.0f s", ", ".join(busy), timeout)
        return not busy

    def _run(self) -> None:
        while not self._stopping.is_set():
            key = self._queue.get(timeout=self._poll)
            if key is None:
                continue
            try:
                self._process(key)
            except Exception:  # a bug must not kill the worker; the key is retried with backoff
                log.exception("processing %s failed", key)
                self._queue.add_rate_limited(key)
            finally:
                self._queue.done(key)
