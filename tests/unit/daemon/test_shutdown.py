"""The stop sequence says it did not finish when a step gave up waiting for its part, not only
when the deadline passed: a part still running must not meet the interpreter's finalization."""

from __future__ import annotations

import threading

from libvirt_provider.adapters.runtime.shutdown import Shutdown


def test_every_step_done_is_a_finished_stop() -> None:
    ran: list[str] = []
    finished = Shutdown(
        [("a", lambda: ran.append("a")), ("b", lambda: None)],
        [("c", lambda: ran.append("c")), ("d", lambda: True)],
        deadline=30.0,
    ).run()
    assert finished
    assert sorted(ran) == ["a", "c"]


def test_a_step_that_gave_up_on_its_part_is_an_unfinished_stop() -> None:
    ran: list[str] = []
    finished = Shutdown(
        [("the leader", lambda: False), ("other", lambda: ran.append("other"))],
        [("then", lambda: ran.append("then"))],
        deadline=30.0,
    ).run()
    assert not finished
    assert ran == ["other", "then"]  # the rest still ran


def test_a_step_past_the_deadline_is_an_unfinished_stop() -> None:
    release = threading.Event()
    try:
        assert not Shutdown([("stuck", lambda: release.wait(60))], [], deadline=0.2).run()
    finally:
        release.set()


def test_a_failing_step_is_logged_and_the_rest_runs() -> None:
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("boom")

    assert Shutdown(
        [("broken", broken)], [("then", lambda: ran.append("then"))], deadline=30.0
    ).run()
    assert ran == ["then"]
