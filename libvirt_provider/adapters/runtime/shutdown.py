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
        # Steps that gave up waiting for their part (they returned False): it still runs.
        self._abandoned: set[str] = set()
        self._lock = threading.Lock()

    def _run_step(self, name: str, step: Callable[[], object]) -> None:
        with self._lock:
            self._pending.add(name)
        try:
            if step() is False:
                with self._lock:
                    self._abandoned.add(name)
        except Exception:
            log.exception("stopping %s failed", name)
        finally:
            with self._lock:
                self._pending.discard(name)

    def run(self) -> bool:
        """True when every step finished within the deadline, and no step left its part running
        (a step that returns False gave up waiting for it): a part still running must not meet
        the interpreter's finalization (kopf's cleanup, for one, then fails on executors that
        were already shut down)."""
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
            with self._lock:
                abandoned = ", ".join(sorted(self._abandoned))
            if not abandoned:
                return True
            log.error("stopping: %s still running; exiting without waiting for it", abandoned)
            return False
        with self._lock:
            pending = ", ".join(sorted(self._pending)) or "the last steps"
        log.error(
            "stopping: %s did not finish within %.0f s; exiting without them",
            pending,
            self._deadline,
        )
        return False
