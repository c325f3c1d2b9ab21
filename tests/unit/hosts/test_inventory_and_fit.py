"""A LibvirtHost's status from libvirt's facts, and "fits" decided by the machine resolver."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from catalog.snapshot_source import SnapshotDiskSource, SnapshotSource
from generic.api import VirtualMachineSpec
from libvirt_provider.api import LibvirtMachine
from libvirt_provider.driver.types import HostInventory, PoolInfo
from libvirt_provider.host_api import LibvirtHostSpec, LibvirtHostStatus
from libvirt_provider.hosts import fit as fit_module
from libvirt_provider.hosts.fit import SPEC_MISFIT, ResolverFit
from libvirt_provider.hosts.inventory import (
    Demand,
    allocatable,
    allocatable_of_status,
    host_status,
)
from libvirt_provider.hosts.placement import HostView, Misfit
from tests.support import builders as b

GIB = 2**30
INVENTORY = HostInventory(
    cpus=8,
    memory=32 * GIB + 12345,
    pools=(PoolInfo("vmapi-lab", 100 * GIB, 40 * GIB + 999),),
    networks=frozenset({"vmapi-lab"}),
    domain_types=frozenset({"kvm", "qemu"}),
    machine_types=frozenset({"pc", "q35"}),
    uefi=False,
    libvirt_version="9.0.0",
    hypervisor_version="7.2.0",
)
NOW = "2026-12-02T00:00:00Z"


def status(**kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "allocated": Demand(cpus=2, memory=3 * GIB),
        "machines": 2,
        "problem": None,
        "previous": None,
        "generation": 1,
        "now": NOW,
    }
    args.update(kw)
    spec = args.pop("spec", LibvirtHostSpec())
    inventory = args.pop("inventory", INVENTORY)
    return host_status(inventory, spec, **args)


class TestAllocatable:
    def test_defaults_overcommit_cpu_four_times_and_memory_not_at_all(self) -> None:
        room = allocatable(INVENTORY, LibvirtHostSpec())
        assert room.cpus == 32
        assert room.memory == 32 * GIB

    def test_reservations_come_off_before_the_ratio(self) -> None:
        spec = LibvirtHostSpec.model_validate(
            {"overcommit": {"cpu": 2.0, "memory": 1.5}, "reserved": {"cpus": 2, "memory": "8Gi"}}
        )
        room = allocatable(INVENTORY, spec)
        assert room.cpus == 12
        assert room.memory == 36 * GIB

    def test_a_reservation_larger_than_the_host_leaves_nothing(self) -> None:
        spec = LibvirtHostSpec.model_validate({"reserved": {"cpus": 64, "memory": "1Ti"}})
        room = allocatable(INVENTORY, spec)
        assert (room.cpus, room.memory) == (0, 0)

    @pytest.mark.parametrize("ratio", [0, -1.0])
    def test_ratios_must_be_positive(self, ratio: float) -> None:
        with pytest.raises(ValidationError):
            LibvirtHostSpec.model_validate({"overcommit": {"cpu": ratio}})


class TestHostStatus:
    def test_the_status_says_what_the_host_has_offers_and_holds(self) -> None:
        body = status()
        LibvirtHostStatus.model_validate(body)
        assert body["capacity"]["memory"] == "32Gi"
        assert body["capacity"]["pools"] == [
            {"name": "vmapi-lab", "capacity": "100Gi", "available": "40Gi"}
        ]
        assert body["allocatable"] == {"cpus": 32, "memory": "32Gi"}
        assert body["allocated"] == {"cpus": 2, "memory": "3Gi", "machines": 2}
        assert body["offers"]["machineTypes"] == ["pc", "q35"]
        assert body["summary"] == {"cpus": "2/32", "memory": "3.0Gi/32.0Gi"}
        (ready,) = body["conditions"]
        assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "HostReady")
        assert allocatable_of_status(body) == (32, 32 * GIB)

    def test_nothing_changes_when_nothing_changed(self) -> None:
        first = status()
        again = status(previous=LibvirtHostStatus.model_validate(first), now="later")
        assert again == first

    def test_a_pools_free_space_is_written_again_only_once_it_moved_by_a_hundredth(self) -> None:
        """Pools are rescanned every heartbeat; a busy filesystem moves by megabytes each time,
        and each would otherwise be a status write."""
        first = status()
        previous = LibvirtHostStatus.model_validate(first)

        def after(available: int) -> str:
            moved = replace(INVENTORY, pools=(PoolInfo("vmapi-lab", 100 * GIB, available),))
            pools = status(inventory=moved, previous=previous)["capacity"]["pools"]
            return str(pools[0]["available"])

        assert after(40 * GIB - 900 * 2**20) == "40Gi"  # under 1 % of 100 GiB: as written
        assert after(40 * GIB + 900 * 2**20) == "40Gi"
        assert after(38 * GIB) == "38Gi"
        assert after(45 * GIB) == "45Gi"
        # A pool of another size is a new pool: its figure is written as it is.
        resized = replace(
            INVENTORY, pools=(PoolInfo("vmapi-lab", 200 * GIB, 40 * GIB + 5 * 2**20),)
        )
        assert status(inventory=resized, previous=previous)["capacity"]["pools"][0] == {
            "name": "vmapi-lab",
            "capacity": "200Gi",
            "available": "40965Mi",
        }

    def test_libvirt_unreachable_keeps_the_figures_and_turns_ready_false(self) -> None:
        first = status()
        down = status(
            inventory=None,
            problem="libvirtd does not answer",
            previous=LibvirtHostStatus.model_validate(first),
            now="2026-12-02T00:01:00Z",
        )
        assert down["capacity"] == first["capacity"]
        (ready,) = down["conditions"]
        assert (ready["status"], ready["reason"]) == ("False", "LibvirtUnavailable")
        assert ready["lastTransitionTime"] == "2026-12-02T00:01:00Z"

    def test_a_users_edit_of_the_figures_is_put_back(self) -> None:
        first = status()
        edited = {**first, "allocatable": {"cpus": 999, "memory": "1Ei"}}
        again = status(previous=LibvirtHostStatus.model_validate(edited))
        assert again["allocatable"] == first["allocatable"]

    def test_a_status_without_figures_is_not_placeable(self) -> None:
        assert allocatable_of_status({}) is None
        assert allocatable_of_status({"allocatable": {"cpus": "many"}}) is None


def view(name: str = "h1", **kw: Any) -> HostView:
    fields: dict[str, Any] = {
        "labels": {},
        "ready": True,
        "unschedulable": False,
        "cpus": 32,
        "memory": 32 * GIB,
        "pools": {"vmapi-lab": 100 * GIB, "fast": 100 * GIB},
        "domain_types": frozenset({"kvm", "qemu"}),
        "networks": frozenset({"vmapi-lab"}),
    }
    fields.update(kw)
    return HostView(name=name, **fields)


def fit_for(vm: dict[str, Any] | None = None, **catalog: Any) -> ResolverFit:
    return ResolverFit(
        vm_name="web",
        vm=VirtualMachineSpec.model_validate(vm if vm is not None else b.vm_spec()),
        machine=LibvirtMachine.model_validate(b.machine()),
        catalog=b.catalog(**catalog),
    )


class TestConnectedCondition:
    def test_a_local_host_has_no_connected_condition(self) -> None:
        types = [cond["type"] for cond in status()["conditions"]]
        assert types == ["Ready"]

    def test_a_remote_host_says_why_it_is_not_connected(self) -> None:
        body = status(
            inventory=None,
            problem="libvirtd does not answer",
            connection=("HostKeyMismatch", "Host key verification failed"),
        )
        by_type = {cond["type"]: cond for cond in body["conditions"]}
        assert by_type["Ready"]["status"] == "False"
        assert by_type["Connected"]["status"] == "False"
        assert by_type["Connected"]["reason"] == "HostKeyMismatch"
        assert by_type["Connected"]["message"] == "Host key verification failed"

    def test_the_transition_time_moves_only_when_the_status_flips(self) -> None:
        first = status(connection=("Unreachable", "refused"), now="2026-12-02T00:00:00Z")
        previous = LibvirtHostStatus.model_validate(first)
        again = status(
            connection=("AuthenticationFailed", "denied"),
            previous=previous,
            now="2026-12-02T00:05:00Z",
        )
        up = status(
            connection=("Connected", "connected"),
            previous=LibvirtHostStatus.model_validate(again),
            now="2026-12-02T00:09:00Z",
        )
        since = [
            next(c for c in b["conditions"] if c["type"] == "Connected")["lastTransitionTime"]
            for b in (first, again, up)
        ]
        assert since == ["2026-12-02T00:00:00Z", "2026-12-02T00:00:00Z", "2026-12-02T00:09:00Z"]


class TestResolverFit:
    def test_a_host_that_offers_everything_gives_the_machines_demand(self) -> None:
        found = fit_for()(view())
        assert isinstance(found, Demand)
        assert found.cpus >= 1
        assert found.memory == 256 * 2**20
        assert found.pools == (("vmapi-lab", 2 * GIB),)

    def test_a_host_without_the_network_is_a_misfit_that_names_it(self) -> None:
        found = fit_for()(view(networks=frozenset({"other"})))
        assert found == Misfit("lacks network vmapi-lab")

    def test_a_host_without_the_pool_or_domain_type(self) -> None:
        assert fit_for()(view(pools={"other": GIB})) == Misfit("lacks pool vmapi-lab")
        lm_fit = ResolverFit(
            vm_name="web",
            vm=VirtualMachineSpec.model_validate(b.vm_spec()),
            machine=LibvirtMachine.model_validate(b.machine({"domainType": "kvm"})),
            catalog=b.catalog(),
        )
        assert lm_fit(view(domain_types=frozenset({"qemu"}))) == Misfit("lacks domain type kvm")

    def test_machine_type_and_firmware_are_checked_against_the_hosts_offers(self) -> None:
        assert fit_for()(view(machine_types=frozenset({"pc"}))) == Misfit("lacks machine type q35")
        assert isinstance(fit_for()(view(machine_types=frozenset({"pc", "q35"}))), Demand)
        efi = b.image(firmware={"type": "UEFI"})
        assert fit_for(images=[efi])(view()) == Misfit("lacks UEFI firmware")
        assert isinstance(fit_for(images=[efi])(view(uefi=True)), Demand)

    def test_a_spec_wrong_everywhere_is_reported_not_placed(self) -> None:
        fit = fit_for(b.vm_spec(instanceType=b.ref("LibvirtMachineClass", "missing")))
        assert fit(view()) == Misfit(SPEC_MISFIT)
        assert fit.problems
        assert fit.problems[0].reason == "ReferenceNotFound"

    def test_secrets_are_not_needed_to_place(self) -> None:
        vm = b.vm_spec(
            bootstrap={"cloudInit": {"userData": {"name": "nowhere", "key": "userdata"}}}
        )
        assert isinstance(fit_for(vm)(view()), Demand)

    def test_one_resolution_serves_every_host_of_a_shape(self, monkeypatch: Any) -> None:
        calls = 0
        real = fit_module.resolve_machine  # type: ignore[attr-defined]

        def counting(**kw: Any) -> Any:
            nonlocal calls
            calls += 1
            return real(**kw)

        monkeypatch.setattr(fit_module, "resolve_machine", counting)
        fit = fit_for()
        for i in range(50):
            fit(view(f"h{i}"))
        fit(view("odd", networks=frozenset({"x"})))
        assert calls == 2

    def test_a_clone_fits_only_the_host_holding_its_snapshot(self) -> None:
        """Hosts of one shape no longer resolve alike: the snapshot's host is the only fit, and
        the others are counted by what they lack (decide's message then names the snapshot)."""
        snap = SnapshotSource(
            namespace="default",
            name="s1",
            uid="u1",
            ready=True,
            host="h2",
            disks={"bootDisk": SnapshotDiskSource("vmapi-lab", "snap-u1-b.qcow2", "qcow2", GIB)},
            boot_image="tiny",
        )
        vm = b.vm_spec(
            bootDisk={"source": {"snapshot": b.ref("LibvirtSnapshot", "s1")}, "sizeGiB": 2}
        )
        fit = fit_for(vm, snapshots=[snap])
        assert fit(view("h1")) == Misfit("lacks snapshot s1")
        assert isinstance(fit(view("h2")), Demand)
        assert fit(view("h3")) == Misfit("lacks snapshot s1")


class TestTheDrainIsNotTheAgents:
    """`status.drain` and the Drained condition are the drain controller's: the agent's status
    carries them as the object shows them, so its merge patch never removes them."""

    def test_the_drain_and_its_condition_are_kept(self) -> None:
        drained = {
            "type": "Drained",
            "status": "False",
            "reason": "Draining",
            "message": "0 of 1 moved, 1 migrating",
            "lastTransitionTime": NOW,
        }
        drain = {"phase": "Draining", "id": 3, "message": "0 of 1 moved, 1 migrating"}
        first = status()
        previous = LibvirtHostStatus.model_validate(
            {**first, "conditions": [*first["conditions"], drained], "drain": drain}
        )
        body = status(previous=previous, now="2026-12-02T00:01:00Z")
        assert [x["type"] for x in body["conditions"]] == ["Ready", "Drained"]
        assert body["conditions"][1] == drained
        assert body["drain"]["phase"] == "Draining"
        assert body["drain"]["id"] == 3
