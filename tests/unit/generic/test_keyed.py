"""KeyedWorkers: each pass's outcome reaches the queue, the resync wakes every known key, and
stop ends the workers and the resync."""

from __future__ import annotations

import threading

from generic.keyed import KeyedWorkers
from generic.workqueue import Outcome
from tests.support.waiting import eventually


def test_a_failed_pass_is_retried_and_a_settled_one_is_not() -> None:
    seen: list[str] = []
    lock = threading.Lock()

    def reconcile(key: str) -> Outcome:
        with lock:
            seen.append(key)
            failing = key == "bad" and seen.count("bad") == 1
        return Outcome(retry=failing)

    workers = KeyedWorkers(
        reconcile, list, name="t", workers=2, resync_seconds=3600, base_delay=0.01
    )
    workers.start()
    try:
        workers.wake(["good", "bad"])
        eventually(lambda: seen.count("bad") == 2 and seen.count("good") == 1, timeout=5)
        assert len(workers.queue) == 0
    finally:
        workers.stop()
    assert seen.count("good") == 1


def test_resync_wakes_every_known_key_until_stopped() -> None:
    known = {"a", "b"}
    seen: list[str] = []
    lock = threading.Lock()

    def reconcile(key: str) -> Outcome:
        with lock:
            seen.append(key)
        return Outcome()

    workers = KeyedWorkers(
        reconcile, lambda: sorted(known), name="t", workers=1, resync_seconds=0.05
    )
    workers.start()
    eventually(lambda: seen.count("a") >= 2 and seen.count("b") >= 2, timeout=5)
    workers.stop()
    with lock:
        after_stop = len(seen)
    workers.wake_all()
    assert workers.queue.get(timeout=0) is None
    assert len(seen) == after_stop
