"""How a daemon learns it must stop: SIGTERM and SIGINT, recorded without a lock."""

from __future__ import annotations

import select
import signal
import socket

__all__ = ["StopSignals"]


class StopSignals:
    """SIGTERM and SIGINT, recorded by a handler that takes no lock.

    A Python signal handler runs on the main thread between any two bytecodes: inside
    `threading.Event.wait`'s own lock, or inside the handler of a signal that came a moment
    earlier (`make run` sends SIGINT to the process group and SIGTERM from its runner at once).
    A handler calling `Event.set()` then takes a non-reentrant lock its own thread holds, and the
    daemon never stops. This one only appends to a list; the wait wakes through the wakeup fd.
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        self._wake_r, wake_w = socket.socketpair()
        wake_w.setblocking(False)
        self._wake_w = wake_w  # kept open for the process's life, as the wakeup fd
        signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._record)

    def _record(self, signum: int, _frame: object) -> None:
        self.received.append(signum)

    def wait(self, timeout: float) -> bool:
        """True once a stop signal came; otherwise after at most `timeout` seconds."""
        if not self.received:
            readable, _, _ = select.select([self._wake_r], [], [], timeout)
            if readable:
                self._wake_r.recv(512)
        return bool(self.received)
