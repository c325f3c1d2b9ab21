"""The work queue: dedup, no concurrent processing of a key, delays and backoff."""

from __future__ import annotations

import threading

from generic.workqueue import WorkerPool, WorkQueue
from tests.eventually import eventually


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_duplicates_collapse() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    assert queue.get(timeout=0) == "a"
    assert queue.get(timeout=0) == "b"
    assert queue.get(timeout=0) is None


def test_key_added_while_processing_comes_back_after_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")
    assert queue.get(timeout=0) is None  # not handed out twice at once
    queue.done("a")
    assert queue.get(timeout=0) == "a"


def test_delayed_keys_wait_for_their_time() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 5)
    assert queue.get(timeout=0) is None
    clock.now = 5
    assert queue.get(timeout=0) == "a"


def test_backoff_doubles_up_to_the_cap_and_resets() -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=1, max_delay=5, clock=Clock())
    assert [queue.add_rate_limited("a") for _ in range(5)] == [1, 2, 4, 5, 5]
    queue.forget("a")
    assert queue.add_rate_limited("a") == 1


def test_shutdown_releases_waiting_workers() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.shutdown()
    assert queue.get() is None
    queue.add("a")
    assert len(queue) == 0


def test_pool_processes_and_survives_a_crashing_key() -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=0.01)
    seen: list[str] = []
    lock = threading.Lock()

    def process(key: str) -> None:
        with lock:
            seen.append(key)
        if key == "bad" and seen.count("bad") == 1:
            raise RuntimeError("bug")

    pool = WorkerPool(queue, process, workers=2)
    pool.start()
    for key in ("a", "bad", "b"):
        queue.add(key)
    eventually(lambda: seen.count("bad") == 2 and "a" in seen and "b" in seen, timeout=5)
    pool.stop()


def test_pool_can_stop_and_start_again_without_losing_keys() -> None:
    queue: WorkQueue[str] = WorkQueue()
    seen: list[str] = []
    pool = WorkerPool(queue, seen.append, workers=1, poll=0.05)
    pool.start()
    queue.add("a")
    eventually(lambda: seen == ["a"], timeout=5)
    pool.stop()
    queue.add("b")
    assert len(queue) == 1
    pool.start()
    eventually(lambda: seen == ["a", "b"], timeout=5)
    pool.stop()


def test_success_cancels_pending_retries_but_not_timed_rechecks() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(base_delay=1, clock=clock)
    queue.add_rate_limited("a")
    queue.add_after("a", 2)
    queue.forget("a")
    clock.now = 1
    assert queue.get(timeout=0) is None  # the retry was cancelled
    clock.now = 2
    assert queue.get(timeout=0) == "a"  # the timed re-check was not
    queue.done("a")
    queue.add_rate_limited("a")
    clock.now = 3
    assert queue.get(timeout=0) == "a"  # a new failure retries again, from the base delay
