"""Preemption's pure choice: which spot machines on which host make room for a machine that is
not spot, and which preempted machines start again, in what order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.hosts.placement import HostView, Ledger, Misfit, Request, decide
from libvirt_provider.hosts.preemption import (
    MAX_COMBINATIONS,
    Preempted,
    choose,
    restarts,
)

GIB = 2**30
REQ = Request(namespace="ns")


def host(name: str, *, cpus: int = 8, memory: int = 4 * GIB, **kw: object) -> HostView:
    fields: dict[str, object] = {
        "labels": {},
        "ready": True,
        "unschedulable": False,
        "pools": {"pool": 100 * GIB},
    }
    fields.update(kw)
    return HostView(name=name, cpus=cpus, memory=memory, **fields)  # type: ignore[arg-type]


def mem(gib: float, *, spot: bool = False) -> Demand:
    return Demand(cpus=1, memory=int(gib * GIB), spot=spot)


def fixed(demand: Demand | Misfit):  # type: ignore[no-untyped-def]
    return lambda _h: demand


def spot(ledger: Ledger, key: str, on: str, gib: float, created: float) -> None:
    ledger.put(key, on, mem(gib, spot=True), created=created)


class TestChoice:
    def test_a_regular_machine_that_fits_nowhere_preempts_one_spot_machine(self) -> None:
        ledger = Ledger()
        spot(ledger, "ns/s", "a", 4, created=1)
        assert decide(REQ, [host("a")], fixed(mem(1)), ledger).host is None
        chosen = choose(REQ, [host("a")], fixed(mem(1)), ledger)
        assert chosen is not None
        assert (chosen.host, chosen.victims) == ("a", ("ns/s",))

    def test_never_for_a_spot_machine(self) -> None:
        ledger = Ledger()
        spot(ledger, "ns/s", "a", 4, created=1)
        assert choose(REQ, [host("a")], fixed(mem(1, spot=True)), ledger) is None

    def test_regular_machines_are_never_preempted(self) -> None:
        ledger = Ledger()
        ledger.put("ns/r", "a", mem(4), created=1)
        assert choose(REQ, [host("a")], fixed(mem(1)), ledger) is None

    def test_fewest_preemptions_first(self) -> None:
        # Host a needs two small ones gone, host b one big one: b.
        ledger = Ledger()
        spot(ledger, "ns/a1", "a", 2, created=5)
        spot(ledger, "ns/a2", "a", 2, created=6)
        spot(ledger, "ns/b1", "b", 4, created=1)
        chosen = choose(REQ, [host("a"), host("b")], fixed(mem(3)), ledger)
        assert chosen is not None
        assert (chosen.host, chosen.victims) == ("b", ("ns/b1",))

    def test_then_the_youngest(self) -> None:
        ledger = Ledger()
        for i, created in enumerate([10, 30, 20]):
            spot(ledger, f"ns/s{i}", "a", 1, created=created)
        spot(ledger, "ns/old", "b", 4, created=1)
        spot(ledger, "ns/young", "c", 4, created=40)
        hosts = [host("a", memory=3 * GIB), host("b"), host("c")]
        chosen = choose(REQ, hosts, fixed(mem(1)), ledger)
        assert chosen is not None
        # One preemption anywhere; the youngest machine of all is on c.
        assert (chosen.host, chosen.victims) == ("c", ("ns/young",))
        # On one host: the youngest that is enough.
        chosen = choose(REQ, [hosts[0]], fixed(mem(1)), ledger)
        assert chosen is not None
        assert chosen.victims == ("ns/s1",)

    def test_never_more_than_needed(self) -> None:
        # 1 GiB free, 2 GiB asked: one 1 GiB machine is enough, not the 3 GiB one too.
        ledger = Ledger()
        spot(ledger, "ns/big", "a", 2, created=50)
        spot(ledger, "ns/small", "a", 1, created=10)
        chosen = choose(REQ, [host("a")], fixed(mem(2)), ledger)
        assert chosen is not None
        assert chosen.victims == ("ns/big",)  # one is fewer than... still one: the youngest
        ledger = Ledger()
        spot(ledger, "ns/s1", "a", 1, created=50)
        spot(ledger, "ns/s2", "a", 1, created=60)
        spot(ledger, "ns/s3", "a", 1, created=70)
        chosen = choose(REQ, [host("a")], fixed(mem(2)), ledger)
        assert chosen is not None
        assert chosen.victims == ("ns/s3",)

    def test_pool_space_is_not_freed_by_preemption(self) -> None:
        ledger = Ledger()
        spot(ledger, "ns/s", "a", 4, created=1)
        disk = Demand(cpus=1, memory=GIB, pools=(("pool", 200 * GIB),))
        assert choose(REQ, [host("a")], fixed(disk), ledger) is None

    def test_filters_still_apply(self) -> None:
        ledger = Ledger()
        spot(ledger, "ns/s", "a", 4, created=1)
        assert choose(REQ, [host("a", unschedulable=True)], fixed(mem(1)), ledger) is None
        assert choose(REQ, [host("a", ready=False)], fixed(mem(1)), ledger) is None
        assert choose(REQ, [host("a")], fixed(Misfit("lacks network x")), ledger) is None

    def test_spot_machines_not_built_yet_are_not_preempted(self) -> None:
        ledger = Ledger()
        ledger.put("ns/s", "a", mem(4, spot=True), pending=True, created=1)
        assert choose(REQ, [host("a")], fixed(mem(1)), ledger) is None

    def test_not_even_all_spot_machines_are_enough(self) -> None:
        ledger = Ledger()
        ledger.put("ns/r", "a", mem(3), created=1)
        spot(ledger, "ns/s", "a", 1, created=2)
        assert choose(REQ, [host("a")], fixed(mem(2)), ledger) is None

    def test_many_spot_machines_fall_back_to_greedy_yet_enough(self) -> None:
        ledger = Ledger()
        for i in range(40):
            spot(ledger, f"ns/s{i:02}", "a", 0.1, created=i)
        chosen = choose(REQ, [host("a", memory=4 * GIB, cpus=64)], fixed(mem(1)), ledger)
        assert chosen is not None
        # 40 x 0.1 GiB used, 1 GiB asked: C(40, 10) sets is past MAX_COMBINATIONS, so greedy,
        # and still the youngest ten, no more.
        assert MAX_COMBINATIONS < 847_660_528
        assert chosen.victims == tuple(f"ns/s{i:02}" for i in range(39, 29, -1))

    def test_a_tie_goes_to_the_first_host_by_name(self) -> None:
        ledger = Ledger()
        spot(ledger, "ns/b", "b", 4, created=1)
        spot(ledger, "ns/a", "a", 4, created=1)
        chosen = choose(REQ, [host("b"), host("a")], fixed(mem(1)), ledger)
        assert chosen is not None
        assert chosen.host == "a"


class TestBurst:
    def test_a_burst_preempts_only_what_it_needs(self) -> None:
        """Three regular machines of 1 GiB on a host full of four 1 GiB spot machines: three are
        preempted, one per machine, and the fourth stays."""
        ledger = Ledger()
        for i in range(4):
            spot(ledger, f"ns/s{i}", "a", 1, created=i)
        hosts = [host("a")]
        preempted: list[str] = []
        for n in range(3):
            assert decide(REQ, hosts, fixed(mem(1)), ledger).host is None
            chosen = choose(REQ, hosts, fixed(mem(1)), ledger)
            assert chosen is not None
            for victim in chosen.victims:
                ledger.drop(victim)
            preempted += chosen.victims
            ledger.put(f"ns/r{n}", chosen.host, chosen.demand, pending=True)
        assert preempted == ["ns/s3", "ns/s2", "ns/s1"]
        assert "ns/s0" in ledger

    @settings(max_examples=60, deadline=None)
    @given(
        st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=7),
        st.integers(min_value=1, max_value=6),
    )
    def test_the_choice_is_minimal(self, sizes: list[int], asked: int) -> None:
        """No victim could be spared: without any one of them, the machine would not fit."""
        ledger = Ledger()
        for i, size in enumerate(sizes):
            spot(ledger, f"ns/s{i}", "a", size * 0.25, created=i)
        hosts = [host("a", memory=2 * GIB, cpus=64)]
        demand = mem(asked * 0.25)
        chosen = choose(REQ, hosts, fixed(demand), ledger)
        if chosen is None:
            return
        for spared in chosen.victims:
            trial = Ledger()
            for i, size in enumerate(sizes):
                key = f"ns/s{i}"
                if key in chosen.victims and key != spared:
                    continue
                spot(trial, key, "a", size * 0.25, created=i)
            assert decide(REQ, hosts, fixed(demand), trial).host is None


class TestRestarts:
    def test_in_the_order_preempted_while_the_first_fits(self) -> None:
        ledger = Ledger()
        ledger.put("ns/r", "a", mem(2), created=1)
        line = [
            Preempted("ns/second", "a", mem(1, spot=True), since="2026-01-01T00:00:02Z"),
            Preempted("ns/first", "a", mem(3, spot=True), since="2026-01-01T00:00:01Z"),
        ]
        # 2 GiB free: the first (3 GiB) does not fit, so the second waits behind it.
        assert restarts(line, [host("a")], ledger) == []
        ledger.drop("ns/r")
        assert restarts(line, [host("a")], ledger) == ["ns/first", "ns/second"]
        assert ledger.usage("a").memory == 4 * GIB

    def test_not_on_a_host_that_is_not_ready(self) -> None:
        line = [Preempted("ns/s", "a", mem(1, spot=True), since="2026-01-01T00:00:01Z")]
        assert restarts(line, [host("a", ready=False)], Ledger()) == []
        assert restarts(line, [], Ledger()) == []
        # A cordon keeps new machines away, not one already there.
        assert restarts(line, [host("a", unschedulable=True)], Ledger()) == ["ns/s"]

    def test_disks_that_exist_are_not_counted_again(self) -> None:
        line = [
            Preempted(
                "ns/s",
                "a",
                Demand(cpus=1, memory=GIB, pools=(("pool", 500 * GIB),), spot=True),
                since="2026-01-01T00:00:01Z",
            )
        ]
        assert restarts(line, [host("a")], Ledger()) == ["ns/s"]

    def test_a_machine_its_host_has_not_admitted_yet_goes_first(self) -> None:
        """The race the lab showed: the host refused the machine placed on a spot machine's
        room before it saw that machine preempted; the room is the refused machine's, not the
        spot machine's back."""
        line = [Preempted("ns/spot", "a", mem(3, spot=True), since="2026-01-01T00:00:02Z")]
        refused = [Preempted("ns/regular", "a", mem(3), since="2026-01-01T00:00:01Z")]
        assert restarts(line, [host("a")], Ledger(), refused) == []
        # One too big for the room holds nothing up.
        huge = [Preempted("ns/huge", "a", mem(64), since="2026-01-01T00:00:01Z")]
        assert restarts(line, [host("a")], Ledger(), huge) == ["ns/spot"]
