"""A machine whose creation fails the same way every time costs little: backoff, counted Events.

Seen in the lab: a start that failed on a missing console-log folder made the daemon define and
undo the domain about seven times a second, with an Event each time. Here a start always fails,
and an hour is simulated with the daemon's own work queue on a fake clock.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

from generic.events import EventSeries
from generic.workqueue import WorkQueue
from libvirt_provider.adapters.host.controller import MachineController
from libvirt_provider.errors import RetryableError
from libvirt_provider.machine.reconciler import MachineKey, MachineReconciler
from tests.doubles.hypervisor import FakeHypervisor
from tests.doubles.store import MemoryStore
from tests.support.builders import HOST
from tests.support.reconciling import KEY, make_hypervisor, make_store

HOUR = 3600.0
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class StartAlwaysFails(FakeHypervisor):
    def start(self, uuid: str) -> None:
        self.calls.append("start")
        raise RetryableError("Failed to create file '/missing/x.serial.log': No such file")


class CountingStore(MemoryStore):
    """Routes Events through the daemon's series bookkeeping: `posted` are the Event objects
    that would exist in the API, `occurrences` every report."""

    def __init__(self, base: MemoryStore, clock: Clock) -> None:
        super().__init__(
            machines=base.machines, vms=base.vms, catalog=base.catalog, secrets=base.secrets
        )
        self.series = EventSeries(clock=clock)
        self.posted: Counter[str] = Counter()
        self.occurrences = 0

    def event(self, obj: Any, *, reason: str, message: str, warning: bool = False) -> None:
        self.occurrences += 1
        key = (obj["metadata"].get("uid") or obj["metadata"]["name"], "", reason, message)
        if self.series.step(key).name is None:
            self.series.started(key, f"event-{len(self.posted)}")
            self.posted[reason] += 1


def _simulate_an_hour(hv: FakeHypervisor) -> tuple[int, CountingStore]:
    clock = Clock()
    store = CountingStore(make_store(), clock)
    reconciler = MachineReconciler(
        store=store,
        hypervisor=hv,
        host=HOST.hostname,
        clock=lambda: START + dt.timedelta(seconds=clock.now),
    )
    controller = MachineController(reconciler)
    # The controller's own queue settings, on the simulated clock.
    queue: WorkQueue[MachineKey] = WorkQueue(
        base_delay=controller.queue._base, max_delay=controller.queue._max, clock=clock
    )
    queue.add(KEY)
    passes = 0
    while clock.now < HOUR:
        key = queue.get(timeout=0)
        if key is None:
            due = queue.next_due()
            if due is None:
                break
            clock.now = max(clock.now, due)
            continue
        passes += 1
        queue.settle(key, reconciler.reconcile(key))
        queue.done(key)
    return passes, store


def test_a_start_that_always_fails_is_retried_with_backoff_and_reported_once() -> None:
    hv = StartAlwaysFails(facts=HOST)
    hv.add_volume("vmapi-lab", "guest.qcow2", capacity_bytes=1 << 28)
    passes, store = _simulate_an_hour(hv)

    attempts = hv.calls.count("start")
    assert 5 <= attempts <= 36, attempts
    assert hv.calls.count("define") == attempts
    # Every attempt removed what it made: no domain, only the retried boot volume's removal.
    assert hv.domains == {}
    assert passes <= attempts + 2
    # A handful of Event objects, however many times the failure repeated.
    assert sum(store.posted.values()) <= 5, store.posted
    assert store.posted["Retrying"] == 2  # on the LibvirtMachine and on its VM
    assert store.occurrences > sum(store.posted.values())
    ready = next(
        c
        for c in store.machines["web"]["status"]["conditions"]
        if c["type"] == "InfrastructureReady"
    )
    assert ready["reason"] == "ProviderError"
    assert "serial.log" in ready["message"]


def test_a_healthy_machine_is_not_held_back_by_the_backoff() -> None:
    hv = make_hypervisor()
    passes, store = _simulate_an_hour(hv)
    assert hv.calls.count("define") == 1
    assert hv.calls.count("start") == 1
    assert store.posted["ProviderError"] == 0
    # No lease ever comes here: the address is looked for often at first, then rarely.
    assert 120 <= passes <= 400, passes
