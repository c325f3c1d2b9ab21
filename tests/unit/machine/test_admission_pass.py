"""The reconciler admits a machine before it builds it, and builds nothing it refuses."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from generic.workqueue import Outcome
from libvirt_provider.constants import ADMISSION_COUNTING_SECONDS
from libvirt_provider.hosts.placement import HostView
from libvirt_provider.machine.reconciler import MachineKey, MachineReconciler
from tests.support.builders import HOST, UID
from tests.support.reconciling import KEY, make_hypervisor, make_store, owned_volumes

GI = 2**30


def view(**fields: Any) -> HostView:
    base: dict[str, Any] = {
        "name": HOST.hostname,
        "labels": {},
        "ready": True,
        "unschedulable": False,
        "cpus": 8,
        "memory": 8 * GI,
        "pools": {"vmapi-lab": 100 * GI, "fast": 100 * GI},
    }
    base.update(fields)
    return HostView(**base)


def ready_condition(store: Any) -> dict[str, Any]:
    conditions = store.machines["web"]["status"]["conditions"]
    return next(c for c in conditions if c["type"] == "InfrastructureReady")


def test_a_machine_pinned_to_a_cordoned_host_is_refused_then_built_once_uncordoned() -> None:
    store, hv = make_store(), make_hypervisor()
    host = [view(unschedulable=True)]
    reconciler = MachineReconciler(
        store=store, hypervisor=hv, host=HOST.hostname, host_view=lambda: host[0]
    )
    assert reconciler.reconcile(KEY) == Outcome(retry=True)
    assert hv.domains == {}
    assert owned_volumes(hv) == []
    ready = ready_condition(store)
    assert (ready["status"], ready["reason"]) == ("False", "NotAdmitted")
    assert "the host is cordoned" in ready["message"]
    assert [r for kind, r, _ in store.events if kind == "LibvirtMachine"] == ["NotAdmitted"]
    assert reconciler.allocations()[1] == 0
    assert [(k.namespace, k.name) for k in reconciler.refused()] == [(KEY.namespace, KEY.name)]
    host[0] = view()
    reconciler.reconcile(KEY)
    assert UID in hv.domains
    assert reconciler.allocations()[1] == 1
    assert reconciler.refused() == []


def test_a_machine_that_does_not_fit_the_hosts_memory_is_refused() -> None:
    store, hv = make_store(), make_hypervisor()
    reconciler = MachineReconciler(
        store=store, hypervisor=hv, host=HOST.hostname, host_view=lambda: view(memory=128 * 2**20)
    )
    reconciler.reconcile(KEY)
    assert hv.domains == {}
    assert "insufficient memory (needs 256Mi)" in ready_condition(store)["message"]


def test_after_a_start_nothing_is_admitted_until_the_machines_with_a_domain_are_counted() -> None:
    store, hv = make_store(), make_hypervisor()
    # The watch shows `other` with a domain here; no pass has counted it yet.
    other = MachineKey(KEY.namespace, "other")
    reconciler = MachineReconciler(
        store=store, hypervisor=hv, host=HOST.hostname, host_view=view, built=lambda: [other]
    )
    reconciler.reconcile(KEY)
    assert hv.domains == {}
    assert "counting the machines it runs" in ready_condition(store)["message"]
    # A pass of a machine the copies do not hold yet counts nothing: nothing was booked.
    reconciler.reconcile(other)
    reconciler.reconcile(KEY)
    assert hv.domains == {}
    store.machines["other"] = other_machine(store)
    reconciler.reconcile(other)
    reconciler.reconcile(KEY)
    assert UID in hv.domains


def test_a_machine_listed_at_the_start_and_never_seen_again_holds_admission_back_for_a_while() -> (
    None
):
    """Its finalizer removed by hand between the start's list and the watch's: no pass will
    ever count it, and past the counting deadline the host admits against what it has."""
    store, hv = make_store(), make_hypervisor()
    now = [dt.datetime(2026, 1, 1, tzinfo=dt.UTC)]
    reconciler = MachineReconciler(
        store=store,
        hypervisor=hv,
        host=HOST.hostname,
        host_view=view,
        built=lambda: [MachineKey(KEY.namespace, "ghost")],
        clock=lambda: now[0],
    )
    reconciler.reconcile(KEY)
    assert hv.domains == {}
    now[0] += dt.timedelta(seconds=ADMISSION_COUNTING_SECONDS + 1)
    reconciler.reconcile(KEY)
    assert UID in hv.domains


def other_machine(store: Any) -> dict[str, Any]:
    """A second machine of the store's VM, with a domain already (its status says so)."""
    other = copy.deepcopy(store.machines["web"])
    other["metadata"].update(name="other", uid="0f0e0d0c-0000-4000-8000-00000000cafe")
    return other


def test_volumes_count_as_promised_only_until_they_are_created() -> None:
    """While a machine is being built its volumes are promised space; once they exist, the pool's
    free space (the host's next inventory) shows them, and they are not counted twice, even when
    the machine has no later pass."""
    store, hv = make_store(), make_hypervisor()
    twin = copy.deepcopy(store.machines["web"])
    twin["metadata"].update(name="twin", uid="0f0e0d0c-0000-4000-8000-00000000beef")
    twin["metadata"]["annotations"]["vm-api.io/virtual-machine"] = "twin"
    store.machines["twin"] = twin
    store.vms["twin"] = copy.deepcopy(store.vms["web"])
    store.vms["twin"]["metadata"]["name"] = "twin"
    store.vms["twin"]["spec"]["infrastructureRef"]["name"] = "twin"
    # Room for one boot disk of 1 GiB in each pool, as the inventory shows it after `web`'s.
    host = view(pools={"vmapi-lab": GI, "fast": GI})
    reconciler = MachineReconciler(
        store=store, hypervisor=hv, host=HOST.hostname, host_view=lambda: host
    )
    reconciler.reconcile(KEY)
    assert UID in hv.domains
    reconciler.reconcile(MachineKey(KEY.namespace, "twin"))
    assert len(hv.domains) == 2, ready_condition(store)


def test_a_running_machine_whose_spec_no_longer_resolves_still_counts_after_a_restart() -> None:
    """Its image is gone from the catalog, say: after the daemon restarts, its domain still takes
    its vCPUs and memory, and a newcomer is admitted against that, not against an empty book."""
    store, hv = make_store(), make_hypervisor()
    MachineReconciler(store=store, hypervisor=hv, host=HOST.hostname).reconcile(KEY)
    assert UID in hv.domains
    store.vms["web"]["spec"]["bootDisk"]["source"]["image"]["name"] = "gone"
    twin = copy.deepcopy(store.machines["web"])
    twin["metadata"].update(name="twin", uid="0f0e0d0c-0000-4000-8000-00000000beef")
    twin["metadata"]["annotations"]["vm-api.io/virtual-machine"] = "twin"
    twin.pop("status", None)
    store.machines["twin"] = twin
    store.vms["twin"] = copy.deepcopy(store.vms["web"])
    store.vms["twin"]["metadata"]["name"] = "twin"
    store.vms["twin"]["spec"]["infrastructureRef"]["name"] = "twin"
    store.vms["twin"]["spec"]["bootDisk"]["source"]["image"]["name"] = "tiny"
    # Room for one machine of 256 MiB: the one already running.
    restarted = MachineReconciler(
        store=store,
        hypervisor=hv,
        host=HOST.hostname,
        host_view=lambda: view(memory=300 * 2**20),
        built=lambda: [KEY],
    )
    restarted.reconcile(KEY)
    assert "gone" in ready_condition(store)["message"]
    assert restarted.allocations()[1] == 1
    restarted.reconcile(MachineKey(KEY.namespace, "twin"))
    assert len(hv.domains) == 1
    twin_ready = next(
        c
        for c in store.machines["twin"]["status"]["conditions"]
        if c["type"] == "InfrastructureReady"
    )
    assert "insufficient memory" in twin_ready["message"]
