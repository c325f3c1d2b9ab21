"""One placement pass's accounting: the ledger from the copies plus the assumed bindings, the
demand cache, and what the pass finds to label, report or place."""

from __future__ import annotations

import datetime as dt
from typing import Any

from libvirt_provider.hosts.assumed import ASSUMED_SECONDS, Assumed, Demands
from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.hosts.machines import HostRecord
from libvirt_provider.hosts.placement import HostView, Ledger
from libvirt_provider.hosts.report import Report
from libvirt_provider.hosts.survey import Fix, Survey, survey

LABEL = "infrastructure.vm-api.io/host"
GIB = 2**30
SMALL = Demand(cpus=2, memory=GIB, pools=(("pool", 10 * GIB),))
WALL = dt.datetime(2026, 12, 2, 10, 0, 0, tzinfo=dt.UTC)


def view(name: str, *, ready: bool = True) -> HostView:
    return HostView(
        name=name,
        labels={},
        ready=ready,
        unschedulable=False,
        cpus=32,
        memory=64 * GIB,
        pools={"pool": 100 * GIB},
        heartbeat_lost=not ready,
    )


def lvm(name: str, host: str | None = None, **meta: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "creationTimestamp": "2026-12-02T09:00:00Z",
    }
    spec: dict[str, Any] = {}
    if host is not None:
        spec["host"] = host
        metadata["labels"] = {LABEL: host}
    status = meta.pop("status", {})
    spec.update(meta.pop("spec", {}))
    metadata.update(meta)
    return {"metadata": metadata, "spec": spec, "status": status}


def run(objs: list[dict[str, Any]], assumed: Assumed | None = None, **kw: Any) -> Survey:
    args: dict[str, Any] = {
        "assumed": assumed if assumed is not None else Assumed(),
        "demand": lambda _obj, host: SMALL if host is not None else Demand(),
        "answered": True,
        "now": 1000.0,
        "wall": WALL,
    }
    args.update(kw)
    views = args.pop("views", [view("kvm-a"), view("kvm-b")])
    registered = args.pop("registered", {v.name for v in views})
    return survey(objs, views, registered, **args)


class TestAssumed:
    def test_assumed_until_forgotten(self) -> None:
        assumed = Assumed()
        assumed.assume("ns/a", "kvm-a", SMALL, None, at=1000.0)
        assert "ns/a" in assumed
        assumed.forget("ns/a")
        assert "ns/a" not in assumed
        assumed.forget("ns/a")  # forgetting twice is harmless

    def test_booked_as_pending_unless_the_ledger_has_it(self) -> None:
        assumed = Assumed()
        assumed.assume("ns/a", "kvm-a", SMALL, ("ns", "db"), at=1000.0)
        assumed.assume("ns/b", "kvm-a", SMALL, None, at=1000.0)
        ledger = Ledger()
        ledger.put("ns/b", "kvm-b", SMALL)  # the copies show it bound elsewhere
        assumed.book(ledger, now=1001.0)
        assert ledger.host_of("ns/a") == "kvm-a"
        assert ledger.host_of("ns/b") == "kvm-b"
        assert ledger.usage("kvm-a").pending["pool"] == 10 * GIB
        assert ledger.group(("ns", "db"))["kvm-a"] == 1

    def test_forgotten_once_older_than_the_limit(self) -> None:
        assumed = Assumed()
        assumed.assume("ns/a", "kvm-a", SMALL, None, at=1000.0)
        ledger = Ledger()
        assumed.book(ledger, now=1000.0 + ASSUMED_SECONDS)
        assert "ns/a" in ledger
        assert "ns/a" in assumed
        later = Ledger()
        assumed.book(later, now=1000.0 + ASSUMED_SECONDS + 0.1)
        assert "ns/a" not in later
        assert "ns/a" not in assumed


class TestDemands:
    def test_worked_out_once_per_generations_and_host(self) -> None:
        demands = Demands()
        calls: list[int] = []

        def work() -> Demand:
            calls.append(1)
            return SMALL

        obj = {"metadata": {"generation": 1, "resourceVersion": "10"}}
        vm = {"metadata": {"generation": 4}}
        assert demands.of("ns/a", obj, vm, "kvm-a", work) == SMALL
        # A status write changes the resourceVersion, not the generation.
        status_written = {"metadata": {"generation": 1, "resourceVersion": "11"}}
        assert demands.of("ns/a", status_written, vm, "kvm-a", work) == SMALL
        assert len(calls) == 1
        demands.of("ns/a", {"metadata": {"generation": 2}}, vm, "kvm-a", work)
        demands.of("ns/a", {"metadata": {"generation": 2}}, {"metadata": {}}, "kvm-a", work)
        demands.of("ns/a", {"metadata": {"generation": 2}}, {"metadata": {}}, "kvm-b", work)
        assert len(calls) == 4

    def test_gone_machines_are_forgotten(self) -> None:
        demands = Demands()
        obj, vm = {"metadata": {"generation": 1}}, {"metadata": {"generation": 1}}
        demands.of("ns/a", obj, vm, "kvm-a", lambda: SMALL)
        demands.keep_only(set())
        assert demands.of("ns/a", obj, vm, "kvm-a", Demand) == Demand()


class TestSurvey:
    def test_placed_machines_are_booked_with_their_demand(self) -> None:
        built = lvm("built", "kvm-a", status={"providerID": "libvirt:///x"})
        creating = lvm("creating", "kvm-a", spec={"placement": {"spreadGroup": "db"}})
        found = run([built, creating, lvm("new")])
        usage = found.ledger.usage("kvm-a")
        assert (usage.cpus, usage.memory, usage.machines) == (4, 2 * GIB, 2)
        # Only the machine without a providerID still has volumes to create.
        assert usage.pending["pool"] == 10 * GIB
        assert found.ledger.group(("ns", "db"))["kvm-a"] == 1

    def test_a_machine_on_a_host_without_a_view_takes_what_demand_says(self) -> None:
        found = run([lvm("a", "kvm-gone"), lvm("new")], views=[view("kvm-a")])
        assert found.ledger.host_of("ns/a") == "kvm-gone"
        assert found.ledger.usage("kvm-gone").cpus == 0

    def test_no_ledger_when_nothing_waits(self) -> None:
        def no_demand(_obj: object, _host: object) -> Demand:
            raise AssertionError("the demand is not worked out when nothing waits")

        found = run([lvm("a", "kvm-a")], demand=no_demand)
        assert len(found.ledger) == 0
        assert found.unplaced == ()

    def test_a_binding_seen_in_the_copies_is_no_longer_assumed(self) -> None:
        assumed = Assumed()
        assumed.assume("ns/a", "kvm-a", SMALL, None, at=990.0)
        assumed.assume("ns/b", "kvm-b", SMALL, None, at=990.0)
        found = run([lvm("a", "kvm-a"), lvm("b"), lvm("new")], assumed=assumed)
        assert "ns/a" not in assumed
        # "b" is still unplaced in the copies: its assumed binding counts.
        assert "ns/b" in assumed
        assert found.ledger.host_of("ns/b") == "kvm-b"
        assert found.ledger.usage("kvm-b").pending["pool"] == 10 * GIB

    def test_unplaced_machines_oldest_first_without_those_going_away(self) -> None:
        objs = [
            lvm("late", creationTimestamp="2026-12-02T09:30:00Z"),
            lvm("early", creationTimestamp="2026-12-02T08:00:00Z"),
            lvm("going", deletionTimestamp="2026-12-02T09:59:00Z"),
            lvm("labelled", labels={LABEL: "kvm-a"}),
        ]
        found = run(objs)
        assert [o["metadata"]["name"] for o in found.unplaced] == ["early", "late"]
        assert found.ledger.host_of("ns/labelled") == "kvm-a"

    def test_a_machine_pinned_by_spec_host_alone_gets_its_label(self) -> None:
        pinned = lvm("pinned", spec={"host": "kvm-b"})
        found = run([pinned, lvm("a", "kvm-a")])
        assert found.fixes == (Fix(pinned, HostRecord("kvm-b"), None),)

    def test_a_relabelled_machine_stays_counted_on_spec_host_and_its_label_is_restored(
        self,
    ) -> None:
        moved = lvm("moved", "kvm-a", labels={LABEL: "kvm-b"})
        found = run([moved, lvm("new")])
        assert found.fixes == (Fix(moved, HostRecord("kvm-a", replaced="kvm-b"), None),)
        assert found.ledger.host_of("ns/moved") == "kvm-a"

    def test_a_pin_by_label_alone_gets_spec_host_recorded(self) -> None:
        pinned = lvm("pinned", labels={LABEL: "kvm-b"})
        found = run([pinned])
        assert found.fixes == (Fix(pinned, HostRecord("kvm-b", record=True), None),)

    def test_machines_of_a_lost_host_are_reported_once_answered_for_a_grace(self) -> None:
        on_lost = lvm("a", "kvm-lost")
        views = [view("kvm-a"), view("kvm-lost", ready=False)]
        assert run([on_lost], views=views, answered=False).fixes == ()
        found = run([on_lost, lvm("b", "kvm-a")], views=views, answered=True)
        assert len(found.fixes) == 1
        fix = found.fixes[0]
        assert fix.obj is on_lost
        assert fix.record is None
        assert isinstance(fix.stranded, Report)
        assert fix.stranded.reason == "HostNotReady"

    def test_fixes_come_in_the_order_of_the_machines(self) -> None:
        views = [view("kvm-a"), view("kvm-lost", ready=False)]
        objs = [lvm("lost", "kvm-lost"), lvm("pinned", spec={"host": "kvm-a"})]
        found = run(objs, views=views)
        assert [f.obj["metadata"]["name"] for f in found.fixes] == ["lost", "pinned"]

    def test_a_machine_whose_host_never_registered(self) -> None:
        old = lvm("old", "kvm-x", creationTimestamp="2026-12-02T09:00:00Z")
        new = lvm("new", "kvm-x", creationTimestamp="2026-12-02T09:59:50Z")
        found = run([old, new])
        assert [f.obj["metadata"]["name"] for f in found.fixes] == ["old"]
        assert run([old], registered={"kvm-a", "kvm-b", "kvm-x"}).fixes == ()


MARK: dict[str, Any] = {
    "preemption": {"preemptedAt": "2026-12-02T09:30:00Z"},
    "providerID": "libvirt:///x",
}


class TestPreempted:
    def test_a_preempted_machine_is_not_booked_but_lined_up(self) -> None:
        found = run([lvm("spot", "kvm-a", status=dict(MARK))])
        assert "ns/spot" not in found.ledger
        assert [(p.key, p.host, p.since) for p in found.preempted] == [
            ("ns/spot", "kvm-a", "2026-12-02T09:30:00Z")
        ]

    def test_preemptions_and_restarts_not_seen_back_yet_count(self) -> None:
        running = lvm("a", "kvm-a", status={"providerID": "libvirt:///a"})
        marked = lvm("b", "kvm-a", status=dict(MARK))
        found = run(
            [running, marked],
            preempting={"ns/a": "2026-12-02T09:40:00Z"},
            restarting={"ns/b"},
        )
        assert [p.key for p in found.preempted] == ["ns/a"]
        assert "ns/b" in found.ledger

    def test_a_machine_being_deleted_is_not_lined_up(self) -> None:
        going = lvm("spot", "kvm-a", status=dict(MARK), deletionTimestamp="2026-12-02T10:00Z")
        assert run([going]).preempted == ()

    def test_spot_machines_are_booked_with_their_age(self) -> None:
        spot = Demand(cpus=1, memory=GIB, spot=True)
        found = run(
            [lvm("s", "kvm-a", status={"providerID": "libvirt:///s"}), lvm("new")],
            demand=lambda _obj, _host: spot,
        )
        [entry] = found.ledger.spot_on("kvm-a")
        assert entry.key == "ns/s"
        assert entry.created == dt.datetime(2026, 12, 2, 9, 0, tzinfo=dt.UTC).timestamp()

    def test_machines_their_host_refused_are_listed_while_some_machine_is_preempted(self) -> None:
        refused = lvm(
            "r",
            "kvm-a",
            status={"conditions": [{"type": "InfrastructureReady", "reason": "NotAdmitted"}]},
        )
        found = run([refused, lvm("spot", "kvm-a", status=dict(MARK))])
        assert [(r.key, r.host) for r in found.refused] == [("ns/r", "kvm-a")]
        assert "ns/r" not in found.ledger
        assert run([refused]).refused == ()
