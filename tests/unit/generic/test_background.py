"""The one background-loop helper: a stop ends a sleeping loop, a wake-up is never lost, and a
pause ignores news but not a stop."""

from __future__ import annotations

import threading

from generic.background import BackgroundLoop

# Long enough that a loop still asleep at the end of a test is a failure, not a slow machine.
FOREVER = 3600.0


def test_stop_ends_a_loop_asleep_in_wait_and_reports_it_ended() -> None:
    passes: list[int] = []

    def body(loop: BackgroundLoop) -> None:
        while not loop.stopping:
            passes.append(1)
            loop.wait(FOREVER)

    loop = BackgroundLoop("sleeper", body)
    loop.start()
    assert loop.stop(timeout=10.0)
    assert not loop.alive()
    assert passes  # it ran before it slept


def test_a_wake_while_busy_makes_the_next_wait_return_at_once() -> None:
    busy = threading.Event()
    release = threading.Event()
    woke: list[bool] = []
    done = threading.Event()

    def body(loop: BackgroundLoop) -> None:
        busy.set()
        release.wait(10.0)  # the pass; the wake-up arrives during it
        woke.append(loop.wait(FOREVER))
        done.set()
        loop.pause(FOREVER)

    loop = BackgroundLoop("busy", body)
    loop.start()
    assert busy.wait(10.0)
    loop.wake()
    release.set()
    assert done.wait(10.0), "the wait slept through a wake-up given while the body was busy"
    assert woke == [False]  # woken, not stopping
    assert loop.stop(timeout=10.0)


def test_pause_ignores_wakes_but_not_a_stop() -> None:
    paused = threading.Event()
    results: list[bool] = []

    def body(loop: BackgroundLoop) -> None:
        paused.set()
        results.append(loop.pause(FOREVER))

    loop = BackgroundLoop("paused", body)
    loop.start()
    assert paused.wait(10.0)
    loop.wake()
    assert loop.alive()  # still in its pause: a wake is news, not a stop
    assert loop.stop(timeout=10.0)
    assert results == [True]


def test_stop_before_start_and_twice_is_harmless() -> None:
    loop = BackgroundLoop("never", lambda loop: None)
    assert loop.stop(timeout=0.0)
    assert loop.stop(timeout=0.0)
    assert loop.stopping
