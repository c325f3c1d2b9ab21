"""What the console's paste figures and tests watch while a paste runs: a process's resident
memory (VmRSS in /proc/<pid>/status) and the bytes waiting unread in the receive queues of a
local port's TCP connections (`ss`), each sampled on a thread for its peak. Together they show
where a paste waits: in the kernel's socket buffers, not in the daemon."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["PeakSampler", "receive_queue", "rss_kib"]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def receive_queue(port: int) -> int:
    """Bytes received and not yet read on the established TCP connections whose local port is
    `port` (this network namespace's), the largest of them."""
    out = subprocess.run(
        ["ss", "-tnH", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    return max((int(line.split()[0]) for line in out.splitlines() if line.strip()), default=0)


class PeakSampler:
    """`probe()` every `interval` seconds on a thread of its own until `stop`, which returns the
    highest value seen (a measurement window, not a wait for anything)."""

    def __init__(self, probe: Callable[[], int], interval: float = 0.1) -> None:
        self._probe = probe
        self._interval = interval
        self.peak = probe()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.peak = max(self.peak, self._probe())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        return max(self.peak, self._probe())
