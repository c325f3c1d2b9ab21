"""A process's resident memory as the kernel reports it (VmRSS in /proc/<pid>/status), read
once or sampled on a thread for its peak: the console's paste figures and tests check that the
daemon does not hold what passes through it."""

from __future__ import annotations

import threading
from pathlib import Path

__all__ = ["RssSampler", "rss_kib"]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class RssSampler:
    """`rss_kib(pid)` every `interval` seconds on a thread of its own until `stop`, which
    returns the highest value seen (a measurement window, not a wait for anything)."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self._pid = pid
        self._interval = interval
        self.peak = rss_kib(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.peak = max(self.peak, rss_kib(self._pid))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return max(self.peak, rss_kib(self._pid))
