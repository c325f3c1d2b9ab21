"""A host's admission of the machines bound to it: placement's filters, against what it holds."""

from __future__ import annotations

from typing import Any

from libvirt_provider.api import HostSelector
from libvirt_provider.hosts.admission import Booked, refusal
from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.hosts.placement import HostView, Request
from libvirt_provider.machine.book import HostBook

GI = 2**30
SMALL = Demand(cpus=1, memory=GI // 4, pools=(("pool", 10 * GI),))


def view(**fields: Any) -> HostView:
    base: dict[str, Any] = {
        "name": "kvm-a",
        "labels": {"topology.kubernetes.io/zone": "z1"},
        "ready": True,
        "unschedulable": False,
        "cpus": 4,
        "memory": GI,
        "pools": {"pool": 25 * GI},
    }
    base.update(fields)
    return HostView(**base)


REQUEST = Request(namespace="tenant")


def test_a_machine_that_fits_is_admitted() -> None:
    assert refusal("kvm-a", REQUEST, view(), SMALL, []) is None


def test_a_cordoned_host_refuses_a_new_machine_and_says_so() -> None:
    why = refusal("kvm-a", REQUEST, view(unschedulable=True), SMALL, [])
    assert why is not None
    assert why.startswith("host kvm-a does not admit this machine: the host is cordoned")
    assert "spec.host cannot change" in why


def test_memory_counts_what_the_host_holds_and_the_message_quotes_no_free_figure() -> None:
    held = [Booked(Demand(cpus=1, memory=GI // 2), pending=False)] * 2
    why = refusal("kvm-a", REQUEST, view(), SMALL, held)
    assert why is not None
    assert "insufficient memory (needs 256Mi)" in why
    assert "free" not in why


def test_cpus_and_pool_space_of_machines_still_being_built_count() -> None:
    four = [Booked(Demand(cpus=1), pending=False)] * 4
    assert "insufficient cpu (needs 1)" in (refusal("kvm-a", REQUEST, view(), SMALL, four) or "")
    # 25Gi free, 10Gi of volumes promised to a machine not built yet: 10Gi more still fit, 20 not.
    building = [Booked(SMALL, pending=True)]
    assert refusal("kvm-a", REQUEST, view(), SMALL, building) is None
    built = [Booked(SMALL, pending=True), Booked(SMALL, pending=True)]
    assert "insufficient space in pool pool (needs 10Gi)" in (
        refusal("kvm-a", REQUEST, view(), SMALL, built) or ""
    )
    # Once built, the pool's free space shows the volumes: they are not counted twice.
    assert refusal("kvm-a", REQUEST, view(), SMALL, [Booked(SMALL, pending=False)] * 2) is None


def test_selector_failure_domain_and_readiness_are_placements_filters() -> None:
    gpu = Request(
        namespace="t", selector=HostSelector.model_validate({"matchLabels": {"gpu": "y"}})
    )
    assert "not matching hostSelector" in (refusal("kvm-a", gpu, view(), SMALL, []) or "")
    elsewhere = Request(namespace="t", failure_domain="z2")
    assert "not in failure domain z2" in (refusal("kvm-a", elsewhere, view(), SMALL, []) or "")
    assert refusal("kvm-a", Request(namespace="t", failure_domain="z1"), view(), SMALL, []) is None
    assert "not ready" in (refusal("kvm-a", REQUEST, view(ready=False), SMALL, []) or "")
    assert "has not reported its inventory" in (refusal("kvm-a", REQUEST, None, SMALL, []) or "")


def test_the_book_admits_once_and_counts_only_what_it_holds() -> None:
    host = [view(memory=GI // 2)]
    changes: list[str] = []
    freed: list[str] = []
    book = HostBook(
        "kvm-a",
        view=lambda: host[0],
        on_change=lambda: changes.append("c"),
        on_freed=lambda: freed.append("f"),
    )
    assert book.admit("t/a", REQUEST, SMALL) is None
    assert book.admit("t/b", REQUEST, SMALL) is None
    refused = book.admit("t/c", REQUEST, SMALL)
    assert refused is not None
    assert "insufficient memory" in refused[0]
    assert refused[1] is False  # not the daemon's start: a refusal to report
    assert book.refused() == ["t/c"]
    assert book.allocations() == (Demand(cpus=2, memory=GI // 2), 2)
    # Admitted once: a cordon set while `a` is still being built does not refuse it.
    host[0] = view(memory=GI // 2, unschedulable=True)
    assert book.admit("t/a", REQUEST, SMALL) is None
    book.record("t/a", SMALL)  # its domain now exists
    assert len(changes) == 2
    book.drop("t/b")
    assert freed == ["f"]
    assert book.allocations() == (Demand(cpus=1, memory=GI // 4), 1)
    host[0] = view(memory=GI // 2)
    assert book.admit("t/c", REQUEST, SMALL) is None
    assert book.refused() == []


def test_a_host_without_an_inventory_yet_refuses_for_the_moment() -> None:
    book = HostBook("kvm-a", view=lambda: None)
    refused = book.admit("t/a", REQUEST, SMALL)
    assert refused is not None
    assert refused[1] is True


def test_a_book_without_a_view_admits_everything() -> None:
    book = HostBook("kvm-a", view=None)
    for name in "abcdefgh":
        assert book.admit(f"t/{name}", REQUEST, Demand(cpus=64, memory=64 * GI)) is None
