"""The running parts every keyed controller of the provider shares: a work queue, its workers,
and a slow resync.

The host's controllers (machines, snapshots, and the kinds that follow them) differ in what
wakes a key and in what one pass does; how keys wait, back off, are handed to a fixed number of
threads, and are all looked at again now and then is the same for each. Keeping that here means
each controller holds only its own maps from events to keys, and that a change to how keys are
run (a metric, a shutdown order) is made once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable
from typing import Generic, TypeVar

from generic.background import BackgroundLoop
from generic.workqueue import Outcome, WorkerPool, WorkQueue

__all__ = ["KeyedWorkers"]

K = TypeVar("K", bound=Hashable)


class KeyedWorkers(Generic[K]):
    """A queue of keys drained by `workers` threads, each pass's outcome settled on the queue,
    and every key `known()` returns woken every `resync_seconds`.

    Failures back off from `base_delay`, doubling, to `max_delay` (by default 1 s to 5 minutes:
    a key whose pass fails the same way each time costs about 20 attempts an hour).
    """

    def __init__(
        self,
        reconcile: Callable[[K], Outcome],
        known: Callable[[], Collection[K]],
        *,
        name: str,
        workers: int,
        resync_seconds: float,
        base_delay: float = 1.0,
        max_delay: float = 300.0,
    ) -> None:
        self._reconcile = reconcile
        self._known = known
        self._resync_seconds = resync_seconds
        self.queue: WorkQueue[K] = WorkQueue(base_delay=base_delay, max_delay=max_delay)
        self._pool = WorkerPool(self.queue, self._process, workers=workers, name=name)
        self._resync = BackgroundLoop(f"{name}-resync", self._resync_loop)

    def start(self) -> None:
        self._pool.start()
        self._resync.start()

    def stop(self) -> None:
        """Stop the resync, close the queue, and let the workers finish their current keys."""
        self._resync.stop(timeout=0)
        self.queue.shutdown()
        self._pool.stop()

    def wake(self, keys: Iterable[K]) -> None:
        for key in keys:
            self.queue.add(key)

    def wake_all(self) -> None:
        self.wake(list(self._known()))

    def _resync_loop(self, loop: BackgroundLoop) -> None:
        while not loop.pause(self._resync_seconds):
            self.wake_all()

    def _process(self, key: K) -> None:
        self.queue.settle(key, self._reconcile(key))
