"""The daemon's stop signals: recorded without a lock, and waking the main loop at once."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from libvirt_provider.adapters.process.signals import StopSignals


@pytest.fixture
def restored() -> Iterator[None]:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        signal.set_wakeup_fd(-1)
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_nothing_received_waits_the_timeout(restored: None) -> None:
    stop = StopSignals()
    started = time.monotonic()
    assert not stop.wait(0.2)
    assert time.monotonic() - started >= 0.15


def test_sigint_and_sigterm_together_stop_it_at_once(restored: None) -> None:
    # What `make run` sends on Ctrl-C: SIGINT to the group and SIGTERM from its runner.
    stop = StopSignals()
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGTERM)
    # os.kill runs the handlers of a signal sent to this process before it returns (Python 3.11,
    # gh-90623): the stop is seen by a wait that does not wait at all.
    assert stop.wait(0.0)
    assert sorted(stop.received) == sorted([signal.SIGINT, signal.SIGTERM])


def test_many_signals_in_a_burst_never_hang_the_handler(restored: None) -> None:
    stop = StopSignals()
    for _ in range(200):
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
    assert stop.wait(5.0)
    assert len(stop.received) >= 2
