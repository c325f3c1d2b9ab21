"""A keyed, deduplicating, delayed work queue for level-triggered reconciles.

Watch events (LibvirtMachine, VirtualMachine, catalog), libvirt lifecycle events and the slow resync
all just `add()` a machine's key; a bounded pool of worker threads runs one reconcile per key at a
time. Many events for one key while it waits collapse into one reconcile; an event for a key that is
being reconciled schedules exactly one more run afterwards, so no change is lost and no key is
reconciled twice at once. `add_after()` asks for a later run (a requeue with a delay), used while a
machine converges (booting, waiting for a lease, a graceful shutdown in progress).

Why not kopf's own per-handler retries: they store progress in annotations on the object and
re-run edge-triggered handlers; a libvirt machine's truth lives in libvirt, so every pass must look
at the whole state again. kopf remains the watcher; this queue is the scheduler.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["WorkQueue"]

log = logging.getLogger(__name__)
K = TypeVar("K", bound=Hashable)


@dataclass(order=True)
class _Due(Generic[K]):
    at: float
    seq: int
    key: K = field(compare=False)


class WorkQueue(Generic[K]):
    """Runs `handler(key)` in worker threads; the handler returns a requeue delay or None."""

    def __init__(
        self,
        handler: Callable[[K], float | None],
        *,
        workers: int = 4,
        name: str = "reconcile",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._handler = handler
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[_Due[K]] = []
        self._due: dict[K, float] = {}
        self._running: set[K] = set()
        # Requests for keys that are being reconciled: scheduled when that reconcile ends.
        self._after_run: dict[K, float] = {}
        self._seq = 0
        self._stopped = False
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(workers)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking work; wait for running reconciles to finish (bounded by `timeout`)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        deadline = self._clock() + timeout
        for thread in self._threads:
            if thread.is_alive():
                thread.join(max(0.0, deadline - self._clock()))

    def add(self, key: K) -> None:
        self.add_after(key, 0.0)

    def add_after(self, key: K, delay: float) -> None:
        with self._cond:
            if self._stopped:
                return
            at = self._clock() + max(0.0, delay)
            if key in self._running:
                self._after_run[key] = min(at, self._after_run.get(key, at))
                return
            self._schedule_locked(key, at)

    def _schedule_locked(self, key: K, at: float) -> None:
        current = self._due.get(key)
        if current is not None and current <= at:
            return
        self._due[key] = at
        self._seq += 1
        heapq.heappush(self._heap, _Due(at, self._seq, key))
        self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._due) + len(self._running)

    def _next(self) -> K | None:
        with self._cond:
            while not self._stopped:
                now = self._clock()
                while self._heap:
                    top = self._heap[0]
                    if self._due.get(top.key) != top.at:
                        heapq.heappop(self._heap)  # superseded by an earlier request
                        continue
                    if top.at > now:
                        break
                    heapq.heappop(self._heap)
                    del self._due[top.key]
                    self._running.add(top.key)
                    return top.key
                wait = self._heap[0].at - now if self._heap else None
                self._cond.wait(timeout=None if wait is None else max(wait, 0.01))
            return None

    def _work(self) -> None:
        while True:
            key = self._next()
            if key is None:
                return
            delay: float | None = None
            try:
                delay = self._handler(key)
            except Exception:
                log.exception("reconcile of %s failed unexpectedly; retrying in 10 s", key)
                delay = 10.0
            with self._cond:
                self._running.discard(key)
                if delay is not None:
                    at = self._clock() + max(0.0, delay)
                    self._after_run[key] = min(at, self._after_run.get(key, at))
                at_next = self._after_run.pop(key, None)
                if at_next is not None and not self._stopped:
                    self._schedule_locked(key, at_next)
                self._cond.notify_all()
