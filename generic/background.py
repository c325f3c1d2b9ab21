"""A thread that runs a loop until it is told to stop: the one way the daemon's parts do it.

The daemon's long-lived parts (watches, the host agent, the image cache, the placer, Lease
campaigns, resyncs) each run a loop on a thread of their own, sleep between passes, can be woken
early by news, and must end promptly when the daemon stops. Written by hand each time, the same
few lines drifted: a stop that did not wake a sleeping loop, a wake-up lost between a check and a
wait, a join without a bound. `BackgroundLoop` holds them once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["BackgroundLoop"]


class BackgroundLoop:
    """A daemon thread running `body(loop)`; the body loops while `not loop.stopping`, and sleeps
    through `loop.wait` (woken by `wake` or `stop`) or `loop.pause` (woken by `stop` only).

    `stop` asks the body to end and waits for it, bounded: a body stuck in a call that does not
    return must not hold the daemon's stop sequence beyond its deadline.
    """

    def __init__(self, name: str, body: Callable[[BackgroundLoop], None]) -> None:
        self.name = name
        self._stopping = threading.Event()
        self._woken = threading.Event()
        self._thread = threading.Thread(target=body, args=(self,), name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> bool:
        """Ask the body to end and wait up to `timeout` seconds (None: until it has); True once
        it has ended, or when it never started."""
        self._stopping.set()
        self._woken.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def wake(self) -> None:
        """End the body's current `wait` now (or make its next one return at once)."""
        self._woken.set()

    def begin_pass(self) -> None:
        """Wake-ups that came before a pass begins are served by it: forget them. For a body
        that pauses between its wait and its pass (a rate limit), where news arriving during
        the pause would otherwise wake it once more right after."""
        self._woken.clear()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, until woken or stopped; True when the loop must end. A wake-up
        that came while the body was busy is not lost: this wait then returns at once."""
        self._woken.wait(max(0.0, seconds))
        self._woken.clear()
        return self._stopping.is_set()

    def pause(self, seconds: float) -> bool:
        """Sleep up to `seconds` whatever the news (a rate limit), ending early only to stop;
        True when the loop must end."""
        return self._stopping.wait(max(0.0, seconds))
