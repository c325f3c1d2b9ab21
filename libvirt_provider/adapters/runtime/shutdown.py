"""The daemon's stop sequence, bounded in time."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["Shutdown", "Step"]

log = logging.getLogger(__name__)


Step = tuple[str, Callable[[], object]]


class Shutdown:
    """The stop sequence, bounded in time: a daemon told to stop must be gone within its grace
    period even when the API server and libvirtd no longer answer.

    The first group of steps runs at once, side by side (each waits on its own work, so their
    timeouts must not add up); the second runs after it, in order (the libvirt connection is
    closed only once no worker uses it, and the event loop stopped after that).
    """

    def __init__(self, together: list[Step], then: list[Step], *, deadline: float) -> None:
        self._together = together
        self._then = then
        self._deadline = deadline
        self._pending: set[str] = set()
        self._lock = threading.Lock()

    def _run_step(self, name: str, step: Callable[[], object]) -> None:
        with self._lock:
            self._pending.add(name)
        try:
            step()
        except Exception:
            log.exception("stopping %s failed", name)
        finally:
            with self._lock:
                self._pending.discard(name)

    def run(self) -> bool:
        """True when every step finished within the deadline."""
        done = threading.Event()

        def sequence() -> None:
            threads = [
                threading.Thread(target=self._run_step, args=step, name=f"stop {step[0]}")
                for step in self._together
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            for step in self._then:
                self._run_step(*step)
            done.set()

        threading.Thread(target=sequence, name="shutdown", daemon=True).start()
        if done.wait(self._deadline):
            return True
        with self._lock:
            pending = ", ".join(sorted(self._pending)) or "the last steps"
        log.error(
            "stopping: %s did not finish within %.0f s; exiting without them",
            pending,
            self._deadline,
        )
        return False
