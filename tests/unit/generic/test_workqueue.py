"""The work queue: dedup, no concurrent processing of a key, delays and backoff."""

from __future__ import annotations

import threading

from generic.workqueue import Outcome, WorkerPool, WorkQueue
from tests.support.waiting import eventually


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
    queue: WorkQueue[str] = WorkQueue(base_delay=1, max_delay=5, jitter=0, clock=Clock())
    assert [queue.add_rate_limited("a") for _ in range(5)] == [1, 2, 4, 5, 5]
    queue.forget("a")
    assert queue.add_rate_limited("a") == 1


def test_backoff_jitter_stays_within_its_fraction() -> None:
    draws = iter([0.0, 1.0, 0.5])
    queue: WorkQueue[str] = WorkQueue(
        base_delay=10, max_delay=1000, jitter=0.2, clock=Clock(), rng=lambda: next(draws)
    )
    assert [round(queue.add_rate_limited("a"), 6) for _ in range(3)] == [8.0, 24.0, 40.0]


def test_backoff_of_a_huge_failure_count_stays_at_the_cap() -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=1, max_delay=5, jitter=0, clock=Clock())
    for _ in range(2000):
        delay = queue.add_rate_limited("a")
    assert delay == 5


def test_a_key_has_one_pending_wake_up_the_earliest() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    for delay in (5, 3, 9, 3, 4):
        queue.add_after("a", delay)
    assert len(queue) == 1
    clock.now = 3
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    clock.now = 100
    assert queue.get(timeout=0) is None  # the later times merged into the first


def test_handing_a_key_out_drops_its_pending_wake_up() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 5)
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    clock.now = 5
    assert queue.get(timeout=0) is None  # the pass that ran decides when to look again


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


def test_success_cancels_the_pending_retry_and_keeps_its_own_recheck() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(base_delay=1, jitter=0, clock=clock)
    queue.add_rate_limited("a")
    queue.settle("a", Outcome(requeue_after=2))
    clock.now = 1
    assert queue.get(timeout=0) is None  # the retry was cancelled
    clock.now = 2
    assert queue.get(timeout=0) == "a"  # the re-check the success asked for was not
    queue.done("a")
    queue.settle("a", Outcome(retry=True))
    clock.now = 3
    assert queue.get(timeout=0) == "a"  # a new failure retries again, from the base delay
