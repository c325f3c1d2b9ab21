"""A LibvirtMachine and its VM as placement reads them: which to place, what each asks, what a
refused binding means, and which watch events wake the placer."""

from __future__ import annotations

from typing import Any

from libvirt_provider.api import SpreadBy
from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.hosts.machines import (
    Asked,
    HostRecord,
    Wake,
    after_conflict,
    ask,
    binding,
    demand_on,
    host_of,
    host_record,
    host_record_event,
    key_of,
    linked_vm_key,
    machine_event_wakes,
    per_host_pools,
    spread_group,
    unplaced,
    vm_event_wakes,
)
from libvirt_provider.hosts.placement import HostView
from libvirt_provider.hosts.report import Report
from tests.support import builders as b

LABEL = "infrastructure.vm-api.io/host"
GIB = 2**30


def lvm(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return b.machine(spec, **meta)


def vm(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": "default"}, "spec": b.vm_spec(**spec)}


def view(**kw: Any) -> HostView:
    fields: dict[str, Any] = {
        "name": "kvm-a",
        "labels": {},
        "ready": True,
        "unschedulable": False,
        "cpus": 32,
        "memory": 32 * GIB,
        "pools": {"vmapi-lab": 100 * GIB},
        "domain_types": frozenset({"kvm", "qemu"}),
        "networks": frozenset({"vmapi-lab"}),
    }
    fields.update(kw)
    return HostView(**fields)


class TestReading:
    def test_key_and_spread_group_per_namespace(self) -> None:
        assert key_of(lvm()) == "default/web"
        assert spread_group(lvm()) is None
        assert spread_group(lvm({"placement": {"spreadGroup": "db"}})) == ("default", "db")

    def test_unplaced_means_no_host_by_spec_or_label_and_not_going_away(self) -> None:
        assert unplaced(lvm())
        assert not unplaced(lvm({"host": "kvm-a"}))
        assert not unplaced(lvm(labels={LABEL: "kvm-a"}))
        assert not unplaced(lvm(deletionTimestamp="2026-12-02T10:00:00Z"))

    def test_the_host_is_spec_host_else_the_label(self) -> None:
        assert host_of(lvm()) is None
        assert host_of(lvm(labels={LABEL: "kvm-b"})) == "kvm-b"
        assert host_of(lvm({"host": "kvm-a"}, labels={LABEL: "kvm-b"})) == "kvm-a"

    def test_the_label_follows_a_spec_host_that_lacks_it(self) -> None:
        assert host_record(lvm({"host": "kvm-a"})) == HostRecord("kvm-a")
        assert host_record(lvm({"host": "kvm-a"}, labels={LABEL: "kvm-a"})) is None
        assert host_record(lvm()) is None

    def test_a_relabel_is_undone_spec_host_wins(self) -> None:
        record = host_record(lvm({"host": "kvm-a"}, labels={LABEL: "kvm-b"}))
        assert record == HostRecord("kvm-a", replaced="kvm-b")
        event = host_record_event(record)
        assert event is not None
        assert event.warning
        assert event.reason == "HostLabelRestored"
        assert "'kvm-b'" in event.message
        assert "'kvm-a'" in event.message

    def test_a_pin_by_label_alone_gets_spec_host_recorded(self) -> None:
        record = host_record(lvm(labels={LABEL: "kvm-b"}))
        assert record == HostRecord("kvm-b", record=True)
        assert host_record_event(record) is None
        assert host_record_event(HostRecord("kvm-a")) is None

    def test_the_linked_vm(self) -> None:
        linked = lvm(annotations={"vm-api.io/virtual-machine": "web"})
        assert linked_vm_key(linked) == "default/web"
        assert linked_vm_key(lvm()) is None

    def test_hosts_with_a_pool_of_their_own_from_the_storage_classes(self) -> None:
        local = b.storage_class("local", default=False, hostPools={"kvm-a": "scratch"})
        assert per_host_pools(b.catalog()) == frozenset()
        catalog = b.catalog(storage_classes=[b.storage_class(), local])
        assert per_host_pools(catalog) == {"kvm-a"}


class TestAsk:
    """One model check for the machines placed and the machines accounted for."""

    def test_a_valid_pair_asks_its_constraints_and_fits_by_the_resolver(self) -> None:
        placement = {
            "spreadGroup": "db",
            "spreadBy": "Zone",
            "hostSelector": {"matchLabels": {"disk": "ssd"}},
        }
        asked = ask(lvm({"placement": placement}), vm(failureDomain="z1"), b.catalog())
        assert isinstance(asked, Asked)
        assert asked.request.namespace == "default"
        assert asked.request.failure_domain == "z1"
        assert asked.request.spread_group == "db"
        assert asked.request.spread_by is SpreadBy.ZONE
        assert asked.request.selector is not None
        assert asked.request.selector.match_labels == {"disk": "ssd"}
        found = asked.fit(view())
        assert isinstance(found, Demand)
        assert found.memory == 256 * 2**20

    def test_without_placement_the_defaults(self) -> None:
        asked = ask(lvm(), vm(), b.catalog())
        assert isinstance(asked, Asked)
        assert asked.request.selector is None
        assert asked.request.spread_group is None
        assert asked.request.spread_by is SpreadBy.HOST

    def test_a_vm_spec_that_does_not_parse_is_invalid_spec(self) -> None:
        assert ask(lvm(), vm(bootDisk=5), b.catalog()) == Report(
            "InvalidSpec",
            "VirtualMachine.spec.bootDisk: Input should be a valid dictionary or instance of "
            "BootDisk",
        )

    def test_machine_metadata_that_does_not_parse_is_invalid_spec(self) -> None:
        assert ask(lvm(uid=""), vm(), b.catalog()) == Report(
            "InvalidSpec", "LibvirtMachine.metadata.uid: String should have at least 1 character"
        )

    def test_the_demand_on_a_host(self) -> None:
        asked = ask(lvm(), vm(), b.catalog())
        assert demand_on(asked, view()) == Demand(
            cpus=1, memory=256 * 2**20, pools=(("vmapi-lab", 2 * GIB),)
        )
        # It cannot be resolved there, or not at all: nothing is built for it, nothing taken.
        assert demand_on(asked, view(networks=frozenset())) == Demand()
        assert demand_on(Report("InvalidSpec", "x"), view()) == Demand()


class TestBinding:
    def test_spec_host_and_the_label_on_the_resource_version(self) -> None:
        assert binding("kvm-a", "42") == {
            "metadata": {"resourceVersion": "42", "labels": {LABEL: "kvm-a"}},
            "spec": {"host": "kvm-a"},
        }

    def test_after_a_conflict(self) -> None:
        mine = lvm(generation=1, resourceVersion="41")
        adopted = lvm(generation=1, resourceVersion="42")
        assert after_conflict(mine, None) is True  # gone: nothing to bind
        assert after_conflict(mine, lvm({"host": "kvm-b"}, generation=1)) is False
        assert after_conflict(mine, lvm(generation=2, resourceVersion="42")) is False
        assert after_conflict(mine, adopted) == "42"  # the decision stands: bind again


class TestWakes:
    def test_machine_events(self) -> None:
        assert machine_event_wakes("DELETED", None) is Wake.NOW
        assert machine_event_wakes("ADDED", lvm()) is Wake.NOW
        assert machine_event_wakes("MODIFIED", lvm({"host": "kvm-a"})) is Wake.NOW
        placed = lvm({"host": "kvm-a"}, labels={LABEL: "kvm-a"})
        assert machine_event_wakes("MODIFIED", placed) is Wake.NO
        assert machine_event_wakes("DELETED", placed) is Wake.IF_WAITING
        going = lvm({"host": "kvm-a"}, labels={LABEL: "kvm-a"}, deletionTimestamp="t")
        assert machine_event_wakes("MODIFIED", going) is Wake.IF_WAITING

    def test_vm_events(self) -> None:
        assert vm_event_wakes("ADDED") is Wake.NOW
        assert vm_event_wakes("MODIFIED") is Wake.IF_WAITING
        assert vm_event_wakes("DELETED") is Wake.IF_WAITING
