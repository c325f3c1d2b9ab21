"""Placement's pure core: filters, scoring, the assumed-allocation ledger and the messages."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from libvirt_provider.api import HostSelector, SelectorRequirement, SpreadBy
from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.hosts.placement import (
    ZONE_LABEL,
    HostView,
    Ledger,
    Misfit,
    Request,
    decide,
    selector_matches,
)

GIB = 2**30
SMALL = Demand(cpus=1, memory=1 * GIB, pools=(("pool", 2 * GIB),))


def host(name: str, *, cpus: int = 8, memory: int = 16 * GIB, **kw: object) -> HostView:
    fields: dict[str, object] = {
        "labels": {},
        "ready": True,
        "unschedulable": False,
        "pools": {"pool": 100 * GIB},
    }
    fields.update(kw)
    return HostView(name=name, cpus=cpus, memory=memory, **fields)  # type: ignore[arg-type]


def fits(_host: HostView) -> Demand | Misfit:
    return SMALL


REQ = Request(namespace="ns")


def place_many(n: int, hosts: list[HostView], request: Request = REQ) -> Counter[str]:
    ledger = Ledger()
    placed: Counter[str] = Counter()
    for i in range(n):
        decision = decide(request, hosts, fits, ledger)
        assert decision.host is not None, decision.message
        group = (request.namespace, request.spread_group) if request.spread_group else None
        ledger.put(f"ns/m{i}", decision.host, SMALL, pending=True, group=group)
        placed[decision.host] += 1
    return placed


class TestSpreading:
    def test_twelve_machines_on_three_equal_hosts_are_at_most_one_apart(self) -> None:
        placed = place_many(12, [host("a"), host("b"), host("c")])
        assert sorted(placed.values()) == [4, 4, 4]

    def test_the_least_allocated_share_wins(self) -> None:
        ledger = Ledger()
        ledger.put("ns/old", "a", Demand(cpus=4, memory=8 * GIB))
        decision = decide(REQ, [host("a"), host("b")], fits, ledger)
        assert decision.host == "b"

    def test_a_bigger_host_takes_more(self) -> None:
        placed = place_many(9, [host("big", cpus=16, memory=32 * GIB), host("small")])
        assert placed["big"] == 6
        assert placed["small"] == 3

    def test_a_spread_group_goes_to_different_hosts_first(self) -> None:
        ledger = Ledger()
        # "a" is far emptier, yet the group's second machine goes to "b".
        ledger.put("ns/other", "b", Demand(cpus=6, memory=12 * GIB))
        ledger.put("ns/g1", "a", SMALL, group=("ns", "db"))
        request = Request(namespace="ns", spread_group="db")
        decision = decide(request, [host("a"), host("b")], fits, ledger)
        assert decision.host == "b"
        assert decision.spread_honoured

    def test_a_spread_group_in_another_namespace_is_another_group(self) -> None:
        ledger = Ledger()
        ledger.put("other/g1", "a", SMALL, group=("other", "db"))
        decision = decide(Request(namespace="ns", spread_group="db"), [host("a")], fits, ledger)
        assert decision.host == "a"
        assert decision.spread_honoured

    def test_a_spread_group_that_cannot_be_honoured_still_places_and_says_so(self) -> None:
        ledger = Ledger()
        ledger.put("ns/g1", "a", SMALL, group=("ns", "db"))
        decision = decide(Request(namespace="ns", spread_group="db"), [host("a")], fits, ledger)
        assert decision.host == "a"
        assert not decision.spread_honoured

    def test_spread_by_zone_counts_every_host_of_a_zone(self) -> None:
        hosts = [
            host("a1", labels={ZONE_LABEL: "z1"}),
            host("a2", labels={ZONE_LABEL: "z1"}),
            host("b1", labels={ZONE_LABEL: "z2"}),
        ]
        ledger = Ledger()
        ledger.put("ns/g1", "a1", SMALL, group=("ns", "web"))
        request = Request(namespace="ns", spread_group="web", spread_by=SpreadBy.ZONE)
        assert decide(request, hosts, fits, ledger).host == "b1"


class TestFilters:
    def test_not_ready_and_cordoned_hosts_are_skipped(self) -> None:
        hosts = [host("a", ready=False), host("b", unschedulable=True), host("c")]
        assert decide(REQ, hosts, fits, Ledger()).host == "c"

    def test_failure_domain_by_host_and_by_zone(self) -> None:
        hosts = [host("a", labels={ZONE_LABEL: "z1"}), host("b", labels={ZONE_LABEL: "z2"})]
        assert decide(Request("ns", failure_domain="b"), hosts, fits, Ledger()).host == "b"
        assert decide(Request("ns", failure_domain="z1"), hosts, fits, Ledger()).host == "a"
        nowhere = decide(Request("ns", failure_domain="z9"), hosts, fits, Ledger())
        assert nowhere.host is None
        assert nowhere.message == "0/2 hosts fit: 2 not in failure domain z9"

    def test_host_selector(self) -> None:
        hosts = [host("a", labels={"disk": "ssd"}), host("b", labels={"disk": "hdd"})]
        selector = HostSelector(match_labels={"disk": "hdd"})
        assert decide(Request("ns", selector=selector), hosts, fits, Ledger()).host == "b"
        none = HostSelector(match_labels={"gpu": "yes"})
        decision = decide(Request("ns", selector=none), hosts, fits, Ledger())
        assert decision.message == "0/2 hosts fit: 2 not matching hostSelector"

    def test_what_the_fit_function_refuses_is_counted_by_kind(self) -> None:
        def only_on_b(h: HostView) -> Demand | Misfit:
            return SMALL if h.name == "b" else Misfit("lacks network prod")

        hosts = [host("a"), host("b"), host("c")]
        assert decide(REQ, hosts, only_on_b, Ledger()).host == "b"
        decision = decide(REQ, [host("a"), host("c")], only_on_b, Ledger())
        assert decision.message == "0/2 hosts fit: 2 lacks network prod"

    def test_a_full_host_is_skipped_and_the_message_says_by_how_much(self) -> None:
        big = Demand(cpus=1, memory=4 * GIB)
        ledger = Ledger()
        ledger.put("ns/x", "a", Demand(cpus=1, memory=int(14.5 * GIB)))
        ledger.put("ns/y", "b", Demand(cpus=1, memory=15 * GIB))
        hosts = [host("a"), host("b"), host("c", ready=False)]
        decision = decide(REQ, hosts, lambda _h: big, ledger)
        assert decision.host is None
        assert decision.message == ("0/3 hosts fit: 2 insufficient memory (needs 4Gi), 1 not ready")

    def test_pool_space_counts_volumes_not_yet_created(self) -> None:
        ledger = Ledger()
        ledger.put("ns/x", "a", Demand(pools=(("pool", 99 * GIB),)), pending=True)
        decision = decide(REQ, [host("a")], fits, ledger)
        assert decision.message == ("0/1 hosts fit: 1 insufficient space in pool pool (needs 2Gi)")
        ledger.put("ns/x", "a", Demand(pools=(("pool", 99 * GIB),)), pending=False)
        assert decide(REQ, [host("a")], fits, ledger).host == "a"

    def test_no_host_at_all(self) -> None:
        decision = decide(REQ, [], fits, Ledger())
        assert decision.host is None
        assert decision.message.startswith("0/0 hosts fit")


class TestLedger:
    def test_put_replaces_and_drop_frees(self) -> None:
        ledger = Ledger()
        ledger.put("ns/a", "h1", SMALL, pending=True, group=("ns", "g"))
        ledger.put("ns/a", "h2", SMALL, pending=False, group=("ns", "g"))
        assert ledger.usage("h1").cpus == 0
        assert ledger.usage("h1").pending["pool"] == 0
        assert ledger.usage("h2").machines == 1
        assert ledger.group(("ns", "g")) == Counter({"h2": 1})
        ledger.drop("ns/a")
        assert ledger.usage("h2").cpus == 0
        assert len(ledger) == 0
        assert ledger.group(("ns", "g")) == Counter()

    @settings(max_examples=100, deadline=None)
    @given(
        st.lists(
            st.tuples(st.integers(0, 20), st.sampled_from(["a", "b", "c"]), st.booleans()),
            max_size=60,
        )
    )
    def test_usage_is_always_the_sum_of_the_entries(
        self, steps: list[tuple[int, str, bool]]
    ) -> None:
        ledger = Ledger()
        truth: dict[str, str] = {}
        for index, name, keep in steps:
            key = f"ns/m{index}"
            if keep:
                ledger.put(key, name, SMALL, pending=True)
                truth[key] = name
            else:
                ledger.drop(key)
                truth.pop(key, None)
        for name in "abc":
            count = sum(1 for h in truth.values() if h == name)
            usage = ledger.usage(name)
            assert usage.machines == count
            assert usage.cpus == count * SMALL.cpus
            assert usage.pending["pool"] == count * 2 * GIB


class TestBurstNeverOvercommits:
    @settings(max_examples=50, deadline=None)
    @given(st.integers(1, 60), st.lists(st.integers(1, 8), min_size=1, max_size=5))
    def test_a_burst_placed_through_the_ledger_stays_within_allocatable(
        self, burst: int, sizes: list[int]
    ) -> None:
        hosts = [host(f"h{i}", cpus=cpus, memory=cpus * GIB) for i, cpus in enumerate(sizes)]
        ledger = Ledger()
        for i in range(burst):
            decision = decide(REQ, hosts, fits, ledger)
            if decision.host is None:
                assert decision.message.startswith(f"0/{len(hosts)} hosts fit")
                break
            ledger.put(f"ns/m{i}", decision.host, SMALL, pending=False)
        for h in hosts:
            assert ledger.usage(h.name).cpus <= h.cpus
            assert ledger.usage(h.name).memory <= h.memory


def test_selector_expressions() -> None:
    labels = {"zone": "z1", "disk": "ssd"}

    def sel(op: str, *values: str, key: str = "zone") -> HostSelector:
        return HostSelector(
            match_expressions=[SelectorRequirement(key=key, operator=op, values=list(values))]
        )

    assert selector_matches(sel("In", "z1", "z2"), labels)
    assert not selector_matches(sel("In", "z3"), labels)
    assert selector_matches(sel("NotIn", "z3"), labels)
    assert not selector_matches(sel("NotIn", "z1"), labels)
    assert selector_matches(sel("Exists", key="disk"), labels)
    assert not selector_matches(sel("DoesNotExist", key="disk"), labels)
    assert selector_matches(sel("DoesNotExist", key="gpu"), labels)
    assert selector_matches(None, labels)
