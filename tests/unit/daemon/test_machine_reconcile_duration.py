"""Each LibvirtMachine reconcile's duration is exported per host, and gone with the host.

Why: whether scraping /metrics slows reconciles (docs/metrics.md) is measured on the daemon's own
time per reconcile, which leaves out the API server and the generic controller; and a remote
host whose Lease this daemon lost must not leave a frozen series behind.
"""

from __future__ import annotations

import threading
from typing import cast

import pytest
from prometheus_client import REGISTRY

from generic.workqueue import Outcome
from libvirt_provider.adapters.host import controller as controller_module
from libvirt_provider.adapters.host.controller import MachineController
from libvirt_provider.machine.reconciler import MachineKey, MachineReconciler
from tests.support.waiting import eventually

METRIC = "vmapi_libvirt_machine_reconcile_duration_seconds"
HOST = "reconcile-duration-host"


class _Clock:
    """The controller's monotonic clock, moved on by the reconciles alone."""

    def __init__(self) -> None:
        self._now = 1000.0
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


class _Slow:
    """Takes 50 ms of the fake clock per reconcile, and says when it has done one."""

    def __init__(self, clock: _Clock) -> None:
        self._clock = clock
        self.done = threading.Semaphore(0)

    def reconcile(self, _key: MachineKey) -> Outcome:
        self._clock.advance(0.05)
        self.done.release()
        return Outcome()


def _sample(suffix: str) -> float | None:
    return REGISTRY.get_sample_value(f"{METRIC}_{suffix}", {"host": HOST})


def test_each_reconcile_is_timed_for_its_host_and_the_series_goes_with_the_controller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock()
    monkeypatch.setattr(controller_module, "time", clock)
    slow = _Slow(clock)
    # One worker: each reconcile's 50 ms is its own, not another's advance as well.
    controller = MachineController(cast(MachineReconciler, slow), workers=1, host=HOST)
    controller.start()
    try:
        for name in ("a", "b"):
            controller.queue.add(MachineKey("team", name))
        for _ in range(2):
            assert slow.done.acquire(timeout=10)
        eventually(lambda: _sample("count") == 2, timeout=10, what="two reconciles counted")
        assert _sample("sum") == pytest.approx(0.1)
        assert REGISTRY.get_sample_value(f"{METRIC}_bucket", {"host": HOST, "le": "0.025"}) == 0
        assert REGISTRY.get_sample_value(f"{METRIC}_bucket", {"host": HOST, "le": "0.05"}) == 2
    finally:
        controller.stop()
    assert _sample("count") is None
