"""Which waiting machines a pass looks at again."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.hosts.machines import older_than
from libvirt_provider.hosts.placement import HostView, Ledger
from libvirt_provider.hosts.waiting import RECONSIDER_ALL_SECONDS, Waiting, capacity_state

GIB = 2**30
MIB = 2**20


def host(name: str = "a") -> HostView:
    return HostView(
        name=name,
        labels={"zone": "z1"},
        ready=True,
        unschedulable=False,
        cpus=8,
        memory=16 * GIB,
        pools={"pool": 100 * GIB},
    )


class TestCapacityState:
    def test_pool_space_moving_by_mebibytes_is_no_change(self) -> None:
        before = capacity_state([host()], Ledger())
        written = replace(host(), pools={"pool": 100 * GIB - 10 * MIB})
        assert capacity_state([written], Ledger()) != before  # crossed a GiB boundary
        a = replace(host(), pools={"pool": 100 * GIB + 500 * MIB})
        b = replace(host(), pools={"pool": 100 * GIB + 490 * MIB})
        assert capacity_state([a], Ledger()) == capacity_state([b], Ledger())

    def test_what_a_decision_reads_is_a_change(self) -> None:
        before = capacity_state([host()], Ledger())
        for changed in (
            replace(host(), ready=False),
            replace(host(), unschedulable=True),
            replace(host(), labels={"zone": "z2"}),
            replace(host(), memory=32 * GIB),
            replace(host(), networks=frozenset({"prod"})),
        ):
            assert capacity_state([changed], Ledger()) != before
        assert capacity_state([host(), host("b")], Ledger()) != before

    def test_a_machine_freed_or_placed_is_a_change(self) -> None:
        ledger = Ledger()
        ledger.put("ns/x", "a", Demand(cpus=1, memory=GIB))
        placed = capacity_state([host()], ledger)
        ledger.drop("ns/x")
        assert capacity_state([host()], ledger) != placed
        assert capacity_state([host()], ledger) == capacity_state([host()], Ledger())

    def test_host_order_does_not_matter(self) -> None:
        assert capacity_state([host("a"), host("b")], Ledger()) == capacity_state(
            [host("b"), host("a")], Ledger()
        )


class TestWaiting:
    def test_a_machine_is_looked_at_again_only_when_what_it_was_judged_against_changed(
        self,
    ) -> None:
        waiting = Waiting(started=0.0)
        assert not waiting.unchanged("ns/m", ("state", "1"))
        waiting.remember("ns/m", ("state", "1"))
        assert "ns/m" in waiting
        assert waiting.unchanged("ns/m", ("state", "1"))
        assert not waiting.unchanged("ns/m", ("state", "2"))
        waiting.forget("ns/m")
        assert not waiting.unchanged("ns/m", ("state", "1"))

    def test_a_full_pass_now_and_then_looks_at_everything(self) -> None:
        waiting = Waiting(started=0.0)
        waiting.remember("ns/m", 1)
        assert not waiting.full_pass(RECONSIDER_ALL_SECONDS - 1)
        assert waiting.unchanged("ns/m", 1)
        assert waiting.full_pass(RECONSIDER_ALL_SECONDS)
        assert not waiting.unchanged("ns/m", 1)
        assert not waiting.full_pass(RECONSIDER_ALL_SECONDS + 1)

    def test_deleted_machines_are_forgotten(self) -> None:
        waiting = Waiting(started=0.0)
        waiting.remember("ns/a", 1)
        waiting.remember("ns/b", 1)
        waiting.keep_only({"ns/b"})
        assert len(waiting) == 1
        assert "ns/b" in waiting


def test_older_than() -> None:
    now = dt.datetime(2026, 1, 1, 0, 0, 10, tzinfo=dt.UTC)
    obj = {"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}}
    assert older_than(obj, 5.0, now=now)
    assert not older_than(obj, 20.0, now=now)
    assert older_than({"metadata": {}}, 5.0, now=now)
