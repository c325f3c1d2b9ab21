"""A preempted spot machine on its host's daemon: shut down within the preemption grace (then
forced), kept off with its disks, reported `Preempted`, counted only while it still runs; the
machine it made room for waits without a Warning meanwhile; started again once placement ends
the preemption."""

from __future__ import annotations

import datetime as dt
from typing import Any

from generic.workqueue import Outcome
from libvirt_provider.driver.types import DomainState
from libvirt_provider.hosts.admission import Booked, refusal, waits_for_preempted
from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.hosts.placement import HostView, Request
from libvirt_provider.machine.book import HostBook
from libvirt_provider.machine.reconciler import MachineReconciler
from libvirt_provider.machine.status import compute_status, failed
from tests.doubles.hypervisor import FakeHypervisor
from tests.doubles.store import MemoryStore
from tests.support.builders import HOST, UID
from tests.support.reconciling import KEY, make_hypervisor, make_store, owned_volumes

GI = 2**30
T0 = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)
MARK = {"preemptedAt": "2026-12-01T09:00:00Z", "preemptedFor": "default/regular"}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def spot_world(grace: int = 30) -> tuple[MemoryStore, FakeHypervisor, MachineReconciler, Clock]:
    store, hv, clock = make_store(scheduling={"spot": True}), make_hypervisor(), Clock()
    reconciler = MachineReconciler(
        store=store, hypervisor=hv, host=HOST.hostname, clock=clock, preemption_grace=grace
    )
    reconciler.reconcile(KEY)
    assert hv.domains[UID].state is DomainState.RUNNING
    hv.calls.clear()
    return store, hv, reconciler, clock


def ready(store: MemoryStore) -> dict[str, Any]:
    conditions = store.machines["web"]["status"]["conditions"]
    return dict(next(c for c in conditions if c["type"] == "InfrastructureReady"))


def preempt(store: MemoryStore) -> None:
    store.machines["web"].setdefault("status", {})["preemption"] = dict(MARK)


def test_a_running_spot_machine_is_counted_as_preemptible() -> None:
    _store, _hv, reconciler, _clock = spot_world()
    assert reconciler.allocations()[1] == 1
    assert reconciler.preemptible() == (Demand(cpus=1, memory=GI // 4), 1)


def test_preempted_it_is_asked_to_shut_down_then_forced_after_the_grace() -> None:
    store, hv, reconciler, clock = spot_world(grace=5)
    hv.domains[UID].honours_power_button = False
    preempt(store)
    outcome = reconciler.reconcile(KEY)
    assert hv.calls.count("shutdown") == 1
    assert "destroy" not in hv.calls
    assert outcome == Outcome(requeue_after=2.0)
    cond = ready(store)
    assert (cond["status"], cond["reason"]) == ("False", "Preempted")
    assert "to make room for default/regular" in cond["message"]
    assert hv.domains[UID].autostart is False  # a host reboot must not start it
    assert reconciler.allocations()[1] == 1  # still running: still counted
    assert store.machines["web"]["status"]["preemption"] == MARK  # never changed here

    clock.now = T0 + dt.timedelta(seconds=6)
    reconciler.reconcile(KEY)
    assert "destroy" in hv.calls
    assert hv.domains[UID].state is DomainState.SHUTOFF
    assert reconciler.allocations()[1] == 0
    assert reconciler.preemptible()[1] == 0
    assert store.machines["web"]["status"]["powerState"] == "PoweredOff"
    assert owned_volumes(hv)  # its disks are kept
    assert ready(store)["reason"] == "Preempted"


def test_a_guest_that_honours_the_button_is_off_without_force() -> None:
    store, hv, reconciler, _clock = spot_world()
    preempt(store)
    assert reconciler.reconcile(KEY) == Outcome()
    assert "destroy" not in hv.calls
    assert hv.domains[UID].state is DomainState.SHUTOFF


def test_started_again_once_the_preemption_ends() -> None:
    store, hv, reconciler, _clock = spot_world()
    preempt(store)
    reconciler.reconcile(KEY)
    assert hv.domains[UID].state is DomainState.SHUTOFF
    del store.machines["web"]["status"]["preemption"]
    reconciler.reconcile(KEY)
    assert hv.domains[UID].state is DomainState.RUNNING
    assert ready(store)["reason"] != "Preempted"
    assert reconciler.allocations()[1] == 1


def test_a_preempted_machine_without_a_domain_is_not_built() -> None:
    store, hv = make_store(scheduling={"spot": True}), make_hypervisor()
    preempt(store)
    MachineReconciler(store=store, hypervisor=hv, host=HOST.hostname).reconcile(KEY)
    assert hv.domains == {}
    assert ready(store)["reason"] == "Preempted"


def test_the_placers_mark_is_kept_by_every_status_write() -> None:
    current = {"preemption": dict(MARK), "powerState": "PoweredOn"}
    desired = compute_status(
        current=current,
        power_state="PoweredOff",
        host="h",
        domain_uuid=None,
        domain_name="d",
        addresses=[],
        readiness=failed("Preempted", "m"),
        generation=1,
        pending_changes=[],
        now="2026-12-01T09:00:00Z",
    )
    assert desired["preemption"] == MARK


# -- the machine it made room for ----------------------------------------------------------------

REQUEST = Request(namespace="t")
SPOT = Demand(cpus=1, memory=GI // 2, spot=True)
REGULAR = Demand(cpus=1, memory=GI // 2)


def host(memory: int = GI) -> HostView:
    return HostView(
        name="kvm-a",
        labels={},
        ready=True,
        unschedulable=False,
        cpus=4,
        memory=memory,
        pools={},
    )


def test_the_machine_preempted_for_waits_quietly_until_the_spot_machine_is_off() -> None:
    book = HostBook("kvm-a", view=lambda: host(GI // 2))
    book.record("t/spot", SPOT, leaving=True)
    waiting = book.admit("t/regular", REQUEST, REGULAR)
    assert waiting is not None
    assert waiting.transient
    assert waiting.preempted_first
    assert "once the spot machines preempted there to make room are off" in waiting.message
    book.drop("t/spot")
    assert book.admit("t/regular", REQUEST, REGULAR) is None


def test_a_machine_too_big_even_then_is_refused_as_ever() -> None:
    booked = [Booked(SPOT, pending=False, leaving=True)]
    assert not waits_for_preempted(REQUEST, host(GI // 2), Demand(cpus=1, memory=GI), booked)
    assert not waits_for_preempted(REQUEST, host(GI // 2), REGULAR, [Booked(SPOT, pending=False)])


def test_a_spot_machine_refused_is_told_it_preempts_nothing() -> None:
    why = refusal("kvm-a", REQUEST, host(GI // 2), SPOT, [Booked(REGULAR, pending=False)])
    assert why is not None
    assert "insufficient memory (needs 512Mi) (a spot machine preempts nothing" in why


def test_a_suspended_spot_machine_keeps_its_saved_memory_when_preempted() -> None:
    store, hv, reconciler, _clock = spot_world()
    hv.managed_save(UID)
    hv.calls.clear()
    preempt(store)
    assert reconciler.reconcile(KEY) == Outcome()
    assert hv.domains[UID].has_managed_save
    assert "discard_saved_state" not in hv.calls
    assert store.machines["web"]["status"]["powerState"] == "Suspended"
    assert reconciler.allocations()[1] == 0


def test_a_machine_preempted_wakes_those_refused_for_its_room() -> None:
    freed: list[str] = []
    book = HostBook("kvm-a", view=lambda: host(GI // 2), on_freed=lambda: freed.append("f"))
    book.record("t/spot", SPOT)
    assert book.admit("t/regular", REQUEST, REGULAR) is not None  # refused: no room
    book.record("t/spot", SPOT, leaving=True)  # its preemption seen
    assert freed == ["f"]
    book.record("t/spot", SPOT, leaving=True)  # seen again: nothing new
    assert freed == ["f"]


def test_machines_marked_leaving_before_their_own_pass_make_room_to_wait_for() -> None:
    book = HostBook("kvm-a", view=lambda: host(GI // 2))
    book.record("t/spot", SPOT)
    refused = book.admit("t/regular", REQUEST, REGULAR)
    assert refused is not None
    assert not refused.preempted_first
    assert book.leaving(["t/spot", "t/unknown"])
    assert not book.leaving(["t/spot"])  # already
    waiting = book.admit("t/regular", REQUEST, REGULAR)
    assert waiting is not None
    assert waiting.preempted_first
