"""The reconcile work queue: one run per key at a time, no lost events, delayed requeues."""

from __future__ import annotations

import threading
from collections import Counter

from libvirt_provider.workqueue import WorkQueue
from tests.eventually import eventually


def test_events_for_a_waiting_key_collapse_into_one_run() -> None:
    runs: Counter[str] = Counter()
    gate = threading.Event()

    def handler(key: str) -> None:
        gate.wait(5)
        runs[key] += 1

    q: WorkQueue[str] = WorkQueue(handler, workers=1)
    q.add("blocker")
    q.start()
    for _ in range(50):
        q.add("m1")
    gate.set()
    eventually(lambda: q.pending() == 0, timeout=5)
    assert runs["m1"] == 1
    q.stop()


def test_an_event_during_a_run_causes_exactly_one_more_run_and_never_a_parallel_one() -> None:
    runs = 0
    inside = threading.Event()
    release = threading.Event()
    concurrent = 0
    max_concurrent = 0
    lock = threading.Lock()

    def handler(key: str) -> None:
        nonlocal runs, concurrent, max_concurrent
        with lock:
            concurrent += 1
            max_concurrent = max(max_concurrent, concurrent)
            runs += 1
        if runs == 1:
            inside.set()
            release.wait(5)
        with lock:
            concurrent -= 1

    q: WorkQueue[str] = WorkQueue(handler, workers=4)
    q.start()
    q.add("m1")
    assert inside.wait(5)
    for _ in range(10):
        q.add("m1")
    release.set()
    eventually(lambda: q.pending() == 0 and runs >= 2, timeout=5)
    assert runs == 2
    assert max_concurrent == 1
    q.stop()


def test_a_returned_delay_requeues_the_key() -> None:
    runs: list[str] = []

    def handler(key: str) -> float | None:
        runs.append(key)
        return 0.05 if len(runs) < 3 else None

    q: WorkQueue[str] = WorkQueue(handler, workers=2)
    q.start()
    q.add("m1")
    eventually(lambda: len(runs) == 3, timeout=5)
    eventually(lambda: q.pending() == 0, timeout=5)
    assert runs == ["m1", "m1", "m1"]
    q.stop()


def test_an_immediate_add_overrides_a_later_requeue() -> None:
    runs: list[str] = []
    q: WorkQueue[str] = WorkQueue(lambda k: runs.append(k) and None, workers=1)
    q.start()
    q.add_after("m1", 3600)
    q.add("m1")
    eventually(lambda: runs == ["m1"], timeout=5)
    assert q.pending() == 0
    q.stop()


def test_a_failing_handler_does_not_kill_the_worker() -> None:
    seen: list[str] = []

    def handler(key: str) -> None:
        seen.append(key)
        if key == "bad":
            raise RuntimeError("boom")

    q: WorkQueue[str] = WorkQueue(handler, workers=1)
    q.start()
    q.add("bad")
    q.add("good")
    eventually(lambda: "good" in seen, timeout=5)
    q.stop()
