"""The LibvirtMachine reconciler's sequencing, against an in-memory store and hypervisor.

The real adapters are proven in tests/e2e; these tests pin down the order of steps and what is
left behind when a step fails, which the lab cannot provoke on demand.
"""

from __future__ import annotations

import base64
import datetime as dt
from dataclasses import replace
from typing import Any

import pytest
from lxml import etree

from generic.workqueue import Outcome
from libvirt_provider.driver.types import DomainState, GuestInfo
from libvirt_provider.errors import PermanentError, RetryableError, StateConflictError
from libvirt_provider.machine.powering import NIC_ADDRESS_POLL_DELAY
from libvirt_provider.machine.reconciler import MachineReconciler
from tests.doubles.hypervisor import FakeHypervisor
from tests.doubles.store import MemoryStore
from tests.support.builders import HOST, UID
from tests.support.reconciling import (
    DOMAIN,
    FINALIZER,
    HOST_LABEL,
    KEY,
    Obj,
    make_hypervisor,
    make_reconciler,
    make_store,
    owned_volumes,
)


def test_a_linked_pair_gets_a_volume_and_a_started_domain() -> None:
    store, hv = make_store(), make_hypervisor()
    outcome = make_reconciler(store, hv).reconcile(KEY)
    assert outcome.requeue_after is not None
    assert hv.domains[UID].state is DomainState.RUNNING
    assert owned_volumes(hv) == [f"{DOMAIN}--boot.qcow2"]
    assert hv.calls.index("create_overlay") < hv.calls.index("define") < hv.calls.index("start")
    reasons = [r for kind, r, _ in store.events if kind == "LibvirtMachine"]
    assert reasons[:2] == ["Defined", "Started"]


def test_the_machine_is_ready_once_its_nic_has_an_address() -> None:
    store, hv = make_store(), make_hypervisor()
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    reconciler.reconcile(KEY)
    status = store.machines["web"]["status"]
    ready = {c["type"]: c for c in status["conditions"]}["InfrastructureReady"]
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForAddress")
    mac = (
        etree.fromstring(hv.domains[UID].xml.encode()).find("devices/interface/mac").get("address")
    )
    hv.give_lease(UID, mac, "10.0.0.9")
    assert reconciler.reconcile(KEY) == Outcome()
    status = store.machines["web"]["status"]
    ready = {c["type"]: c for c in status["conditions"]}["InfrastructureReady"]
    assert (ready["status"], ready["reason"]) == ("True", "Running")
    assert status["addresses"][0]["address"] == "10.0.0.9"
    assert status["providerID"] == f"libvirt://{HOST.hostname}/{UID}"


def test_a_nic_still_without_an_address_keeps_the_machine_polled() -> None:
    store, hv = (
        make_store(network={"interfaces": [{"name": "eth0"}, {"name": "eth1"}]}),
        make_hypervisor(),
    )
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    macs = [
        m.get("address")
        for m in etree.fromstring(hv.domains[UID].xml.encode()).iterfind("devices/interface/mac")
    ]
    hv.give_lease(UID, macs[0], "10.0.0.9")
    assert reconciler.reconcile(KEY) == Outcome(requeue_after=NIC_ADDRESS_POLL_DELAY)
    hv.give_lease(UID, macs[1], "10.0.0.10")
    assert reconciler.reconcile(KEY) == Outcome()


def test_a_nic_that_never_gets_an_address_is_looked_at_less_and_less_often() -> None:
    store, hv = (
        make_store(network={"interfaces": [{"name": "eth0"}, {"name": "eth1"}]}),
        make_hypervisor(),
    )
    now = [dt.datetime(2026, 1, 1, tzinfo=dt.UTC)]
    reconciler = MachineReconciler(
        store=store, hypervisor=hv, host=HOST.hostname, clock=lambda: now[0]
    )
    reconciler.reconcile(KEY)
    mac = etree.fromstring(hv.domains[UID].xml.encode()).find("devices/interface/mac")
    hv.give_lease(UID, mac.get("address"), "10.0.0.9")
    delays = []
    for minutes in (0, 2, 10, 60):
        now[0] = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=minutes)
        delays.append(reconciler.reconcile(KEY).requeue_after)
    assert delays == [NIC_ADDRESS_POLL_DELAY, 12.0, 30.0, 30.0]


def test_guest_facts_from_the_agent_appear_while_running_and_go_when_off() -> None:
    store, hv = make_store(), make_hypervisor()
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    assert not any(
        k.startswith("guest") for k in store.machines["web"]["status"]["providerMetadata"]
    )
    hv.domains[UID].guest = GuestInfo(
        agent="connected", facts={"os.name": "Debian GNU/Linux", "hostname": "web"}
    )
    reconciler.reconcile(KEY)
    metadata = store.machines["web"]["status"]["providerMetadata"]
    assert metadata["guestAgent"] == "connected"
    assert (metadata["guestOSName"], metadata["guestHostName"]) == ("Debian GNU/Linux", "web")
    assert metadata["host"] == HOST.hostname
    store.vms["web"]["spec"]["powerState"] = "PoweredOff"
    store.vms["web"]["spec"]["powerOffMode"] = "Hard"
    reconciler.reconcile(KEY)
    assert hv.domains[UID].state is DomainState.SHUTOFF
    metadata = store.machines["web"]["status"]["providerMetadata"]
    assert not any(k.startswith("guest") for k in metadata)


def test_a_failed_start_undoes_what_the_pass_made() -> None:
    store, hv = make_store(), make_hypervisor()
    hv.fail_next("start", RetryableError("libvirtd went away"))
    make_reconciler(store, hv).reconcile(KEY)
    assert hv.domains == {}
    assert owned_volumes(hv) == []
    ready = {c["type"]: c for c in store.machines["web"]["status"]["conditions"]}
    assert ready["InfrastructureReady"]["status"] == "False"
    assert "libvirtd went away" in ready["InfrastructureReady"]["message"]
    # A transient failure is not the contract's terminal ProviderError (the VM's failureReason).
    assert ready["InfrastructureReady"]["reason"] == "Retrying"


def test_a_permanent_failure_is_the_terminal_provider_error() -> None:
    store, hv = make_store(), make_hypervisor()
    hv.fail_next("start", PermanentError("unsupported configuration: no such machine type"))
    make_reconciler(store, hv).reconcile(KEY)
    ready = {c["type"]: c for c in store.machines["web"]["status"]["conditions"]}
    assert ready["InfrastructureReady"]["reason"] == "ProviderError"


def test_an_unlinked_machine_touches_nothing() -> None:
    store, hv = make_store(), make_hypervisor()
    store.vms["web"]["spec"]["infrastructureRef"]["name"] = "other"
    make_reconciler(store, hv).reconcile(KEY)
    assert not {"define", "create_overlay", "create_blank"} & set(hv.calls)
    conditions = {c["type"]: c for c in store.machines["web"]["status"]["conditions"]}
    assert conditions["InfrastructureReady"]["reason"] == "LinkMismatch"
    # A VM that does not link back is not told about this machine's problems.
    assert {kind for kind, _, _ in store.events} == {"LibvirtMachine"}


SNAPSHOT_DISK = {
    "name": "d",
    "source": {"snapshot": {"apiGroup": "x.io", "kind": "Snap", "name": "s"}},
    "sizeGiB": 1,
}


def test_unsupported_configuration_builds_nothing_and_warns_both_objects() -> None:
    store, hv = make_store(disks=[SNAPSHOT_DISK]), make_hypervisor()
    make_reconciler(store, hv).reconcile(KEY)
    assert hv.domains == {}
    assert owned_volumes(hv) == []
    assert {(kind, reason) for kind, reason, _ in store.events} == {
        ("LibvirtMachine", "UnsupportedByProvider"),
        ("VirtualMachine", "UnsupportedByProvider"),
    }


def test_the_same_problem_is_not_announced_twice() -> None:
    store, hv = make_store(disks=[SNAPSHOT_DISK]), make_hypervisor()
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    reconciler.reconcile(KEY)
    assert len(store.events) == 2


def test_another_hosts_machine_is_left_to_its_daemon() -> None:
    store, hv = make_store(), make_hypervisor()
    store.machines["web"]["spec"]["host"] = "elsewhere"
    assert make_reconciler(store, hv).reconcile(KEY) == Outcome()
    assert hv.calls == []


def test_the_label_does_not_decide_which_daemon_serves_a_machine() -> None:
    # Relabelled away: still served here. Labelled here but bound elsewhere: left alone.
    store, hv = make_store(), make_hypervisor()
    store.machines["web"]["metadata"]["labels"][HOST_LABEL] = "elsewhere"
    make_reconciler(store, hv).reconcile(KEY)
    assert "define" in hv.calls
    store, hv = make_store(), make_hypervisor()
    store.machines["web"]["spec"]["host"] = "elsewhere"
    assert make_reconciler(store, hv).reconcile(KEY) == Outcome()
    assert hv.calls == []


def test_a_machine_without_spec_host_is_not_built_by_its_label() -> None:
    # A pin by label alone waits for placement to record spec.host.
    store, hv = make_store(), make_hypervisor()
    del store.machines["web"]["spec"]["host"]
    assert make_reconciler(store, hv).reconcile(KEY) == Outcome()
    assert hv.calls == []


def test_the_finalizer_is_added_before_anything_is_built() -> None:
    store, hv = make_store(), make_hypervisor()
    store.machines["web"]["metadata"]["finalizers"] = []
    assert make_reconciler(store, hv).reconcile(KEY) == Outcome(immediately=True)
    assert store.machines["web"]["metadata"]["finalizers"] == [FINALIZER]
    assert hv.calls == []


def test_deletion_removes_domain_and_volumes_then_the_finalizer() -> None:
    store, hv = make_store(), make_hypervisor()
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    store.machines["web"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert reconciler.reconcile(KEY) == Outcome()
    assert hv.domains == {}
    assert owned_volumes(hv) == []
    assert ("vmapi-lab", "guest.qcow2") in hv.volumes  # the shared base image stays
    assert "web" not in store.machines


def test_a_machine_pinned_by_its_label_gets_spec_host_with_its_finalizer() -> None:
    store, hv = make_store(), make_hypervisor()
    store.machines["web"]["metadata"]["finalizers"] = []
    make_reconciler(store, hv).reconcile(KEY)
    assert store.machines["web"]["spec"]["host"] == HOST.hostname


def test_what_the_hosts_machines_take_follows_creation_and_deletion() -> None:
    store, hv = make_store(), make_hypervisor()
    changes: list[int] = []
    reconciler = MachineReconciler(
        store=store,
        hypervisor=hv,
        host=HOST.hostname,
        on_allocations_change=lambda: changes.append(reconciler.allocations()[1]),
    )
    reconciler.reconcile(KEY)
    allocated, machines = reconciler.allocations()
    assert (allocated.cpus, allocated.memory, machines) == (1, 256 * 2**20, 1)
    reconciler.reconcile(KEY)
    assert changes == [1], "an unchanged machine is not announced again"
    store.machines["web"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    reconciler.reconcile(KEY)
    assert reconciler.allocations()[1] == 0
    assert changes == [1, 0]


def test_a_failed_cleanup_keeps_the_finalizer_and_says_why() -> None:
    store, hv = make_store(), make_hypervisor()
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    store.machines["web"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    hv.fail_next("undefine", PermanentError("nvram is locked"))
    assert reconciler.reconcile(KEY) == Outcome(retry=True)
    assert store.machines["web"]["metadata"]["finalizers"] == [FINALIZER]
    assert any(r == "CleanupFailed" and "nvram" in m for _, r, m in store.events)
    assert reconciler.reconcile(KEY) == Outcome()
    assert "web" not in store.machines


@pytest.mark.parametrize("desired", ["PoweredOff", "Suspended"])
def test_a_machine_created_off_or_suspended_is_defined_but_not_started(desired: str) -> None:
    store, hv = make_store(powerState=desired), make_hypervisor()
    make_reconciler(store, hv).reconcile(KEY)
    assert hv.domains[UID].state is DomainState.SHUTOFF
    assert "start" not in hv.calls


def test_autostart_follows_the_machine_spec() -> None:
    store, hv = make_store(), make_hypervisor()
    store.machines["web"]["spec"]["autostart"] = True
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    assert hv.domains[UID].autostart
    store.machines["web"]["spec"]["autostart"] = False
    reconciler.reconcile(KEY)
    assert not hv.domains[UID].autostart


def test_a_grown_disk_is_resized_online_while_running_and_offline_when_off() -> None:
    store, hv = make_store(), make_hypervisor()
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    store.vms["web"]["spec"]["bootDisk"]["sizeGiB"] = 2
    reconciler.reconcile(KEY)
    reconciler.reconcile(KEY)
    assert list(hv.resized.values()) == [2 << 30]
    assert hv.calls.count("grow_attached_disk") == 1
    assert any(r == "DiskGrown" and "while running" in m for _, r, m in store.events)

    hv.domains[UID].state = DomainState.SHUTOFF
    store.vms["web"]["spec"]["powerState"] = "PoweredOff"
    store.vms["web"]["spec"]["bootDisk"]["sizeGiB"] = 3
    reconciler.reconcile(KEY)
    assert hv.volumes[("vmapi-lab", f"{DOMAIN}--boot.qcow2")].capacity_bytes == 3 << 30


def _running(hotplug: Obj | None = None, **vm_spec: Any) -> tuple[MemoryStore, FakeHypervisor]:
    store, hv = make_store(**vm_spec), make_hypervisor()
    if hotplug is not None:
        store.machines["web"]["spec"]["hotplug"] = hotplug
    make_reconciler(store, hv).reconcile(KEY)
    assert hv.domains[UID].state is DomainState.RUNNING
    hv.calls.clear()
    return store, hv


def _up_to_date(store: MemoryStore) -> Obj:
    conditions = store.machines["web"]["status"]["conditions"]
    return next(c for c in conditions if c["type"] == "UpToDate")


def _resize(store: MemoryStore, cpus: int, memory: str) -> None:
    store.vms["web"]["spec"]["instanceType"] = {"resources": {"cpus": cpus, "memory": memory}}


def test_more_vcpus_and_memory_within_the_headroom_apply_while_running() -> None:
    store, hv = _running(hotplug={"maxCPUs": 4, "maxMemory": "1Gi"})
    _resize(store, 3, "512Mi")
    make_reconciler(store, hv).reconcile(KEY)
    assert "define" not in hv.calls
    assert {"set_vcpus", "set_memory"} <= set(hv.calls)
    root = etree.fromstring(hv.domains[UID].xml.encode())
    assert root.find("vcpu").get("current") == "3"  # type: ignore[union-attr]
    assert _up_to_date(store)["status"] == "True"
    assert any(r == "UpdatedLive" for _, r, _ in store.events)


def test_a_size_beyond_the_headroom_waits_for_the_next_power_off() -> None:
    store, hv = _running()
    _resize(store, 2, "256Mi")
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    assert "define" not in hv.calls
    assert "set_vcpus" not in hv.calls
    up = _up_to_date(store)
    assert (up["status"], up["reason"]) == ("False", "RequiresPowerOff")
    assert "vCPU slots" in up["message"]
    assert store.machines["web"]["status"]["pendingChanges"]

    store.vms["web"]["spec"]["powerState"] = "PoweredOff"
    hv.domains[UID].state = DomainState.SHUTOFF
    reconciler.reconcile(KEY)
    assert "define" in hv.calls
    assert etree.fromstring(hv.domains[UID].xml.encode()).findtext("vcpu") == "2"
    assert _up_to_date(store)["status"] == "True"
    assert not store.machines["web"]["status"].get("pendingChanges")


def test_fewer_vcpus_wait_for_a_power_cycle_as_the_guest_may_never_release_one() -> None:
    store, hv = _running(hotplug={"maxCPUs": 4})
    _resize(store, 2, "256Mi")
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    _resize(store, 1, "256Mi")
    hv.calls.clear()
    reconciler.reconcile(KEY)
    assert "set_vcpus" not in hv.calls
    assert _up_to_date(store)["reason"] == "RequiresPowerOff"


def test_nics_and_data_disks_are_hot_plugged_and_unplugged() -> None:
    store, hv = _running(network={"interfaces": [{"name": "eth0"}]})
    store.vms["web"]["spec"]["network"] = {"interfaces": [{"name": "eth0"}, {"name": "eth1"}]}
    store.vms["web"]["spec"]["disks"] = [{"name": "logs", "source": {"blank": True}, "sizeGiB": 1}]
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    assert "detach_device" not in hv.calls
    assert hv.calls.count("attach_device") == 2
    assert f"{DOMAIN}--data-logs.qcow2" in owned_volumes(hv)
    root = etree.fromstring(hv.domains[UID].xml.encode())
    assert len(root.findall("devices/interface")) == 2
    assert _up_to_date(store)["status"] == "True"

    store.vms["web"]["spec"]["network"] = {"interfaces": [{"name": "eth0"}]}
    del store.vms["web"]["spec"]["disks"]
    hv.calls.clear()
    reconciler.reconcile(KEY)
    assert hv.calls.count("detach_device") == 2
    root = etree.fromstring(hv.domains[UID].xml.encode())
    assert len(root.findall("devices/interface")) == 1
    assert [d.findtext("serial") for d in root.findall("devices/disk")] == ["boot"]
    assert _up_to_date(store)["status"] == "True"


def test_a_failed_live_change_is_pending_and_warned_once() -> None:
    store, hv = _running(hotplug={"maxCPUs": 4})
    _resize(store, 2, "256Mi")
    reconciler = make_reconciler(store, hv)
    for _ in range(2):
        hv.fail_next("set_vcpus", PermanentError("no hotplug here"))
        reconciler.reconcile(KEY)
    up = _up_to_date(store)
    assert (up["status"], up["reason"]) == ("False", "RequiresPowerOff")
    assert "no hotplug here" in up["message"]
    warned = [m for _, r, m in store.events if r == "LiveUpdateFailed"]
    assert len(warned) == 1


def test_changed_cloud_init_data_is_written_and_given_at_the_next_power_cycle() -> None:
    boot = {"cloudInit": {"userData": {"name": "boot", "key": "user-data"}}}
    store = make_store(bootstrap=boot)
    store.secrets["boot"] = {"user-data": base64.b64encode(b"#cloud-config\n# v1\n").decode()}
    hv = make_hypervisor()
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    iso = ("vmapi-lab", f"{DOMAIN}--cidata.iso")
    assert b"# v1" in hv.uploads[iso]

    store.secrets["boot"] = {"user-data": base64.b64encode(b"#cloud-config\n# v2\n").decode()}
    # Secrets are not watched, and a pass reuses the last read for a while unless the pair is
    # edited: touching the machine makes the daemon read the Secret now.
    store.machines["web"]["metadata"].setdefault("labels", {})["touched"] = "1"
    reconciler.reconcile(KEY)
    up = _up_to_date(store)
    assert (up["status"], up["reason"]) == ("False", "RequiresPowerOff")
    assert "cloud-init data changed" in up["message"]
    assert "v2" not in up["message"]
    assert b"# v1" in hv.uploads[iso]

    store.vms["web"]["spec"]["powerState"] = "PoweredOff"
    hv.domains[UID].state = DomainState.SHUTOFF
    reconciler.reconcile(KEY)
    assert b"# v2" in hv.uploads[iso]
    assert _up_to_date(store)["status"] == "True"
    assert not any("v2" in m for _, _, m in store.events)


def test_a_disk_qemu_cannot_grow_online_grows_at_the_next_power_off() -> None:
    store, hv = _running()
    store.vms["web"]["spec"]["bootDisk"]["sizeGiB"] = 2
    hv.fail_next("grow_attached_disk", PermanentError("not on this bus"))
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    up = _up_to_date(store)
    assert (up["status"], up["reason"]) == ("False", "RequiresPowerOff")
    assert "not on this bus" in up["message"]
    assert hv.volumes[("vmapi-lab", f"{DOMAIN}--boot.qcow2")].capacity_bytes == 1 << 30

    store.vms["web"]["spec"]["powerState"] = "PoweredOff"
    hv.domains[UID].state = DomainState.SHUTOFF
    reconciler.reconcile(KEY)
    assert hv.volumes[("vmapi-lab", f"{DOMAIN}--boot.qcow2")].capacity_bytes == 2 << 30
    assert _up_to_date(store)["status"] == "True"


def test_a_restarted_daemon_keeps_the_graceful_timeout_an_earlier_one_began() -> None:
    store, hv = _running()
    hv.domains[UID].honours_power_button = False
    store.machines["web"]["spec"]["gracefulShutdownTimeoutSeconds"] = 60
    store.vms["web"]["spec"]["powerState"] = "PoweredOff"
    start = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)
    MachineReconciler(
        store=store, hypervisor=hv, host=HOST.hostname, clock=lambda: start
    ).reconcile(KEY)
    assert hv.calls.count("shutdown") == 1
    assert store.machines["web"]["status"]["shutdownRequestedAt"] == "2026-12-01T09:00:00Z"

    # A new daemon (nothing in memory) 61 s later: the timeout has passed, so TrySoft forces.
    later = start + dt.timedelta(seconds=61)
    MachineReconciler(
        store=store, hypervisor=hv, host=HOST.hostname, clock=lambda: later
    ).reconcile(KEY)
    assert "destroy" in hv.calls
    assert hv.domains[UID].state is DomainState.SHUTOFF
    assert "shutdownRequestedAt" not in store.machines["web"]["status"]


def test_spec_host_is_compared_with_the_daemons_host_not_libvirts_hostname() -> None:
    store = make_store()
    store.machines["web"]["spec"]["host"] = HOST.hostname
    hv = FakeHypervisor(facts=replace(HOST, hostname="whatever-libvirt-calls-itself"))
    hv.add_volume("vmapi-lab", "guest.qcow2", capacity_bytes=1 << 28)
    make_reconciler(store, hv).reconcile(KEY)
    assert hv.domains[UID].state is DomainState.RUNNING


def test_an_inactive_pool_does_not_block_deletion() -> None:
    store, hv = make_store(), make_hypervisor()
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    store.machines["web"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    # The host's pools are listed in order: "fast" (inactive here), then "vmapi-lab".
    hv.fail_next("volume_names", StateConflictError("storage pool 'fast' is not active"))
    assert reconciler.reconcile(KEY) == Outcome()
    assert "web" not in store.machines
    assert owned_volumes(hv) == []
    assert any(r == "PoolSkipped" and "'fast'" in m for _, r, m in store.events)


def test_an_unreachable_api_server_is_a_retry_not_an_exception() -> None:
    store, hv = make_store(), make_hypervisor()

    def unreachable(namespace: str, name: str) -> None:
        raise RetryableError("Kubernetes API: unreachable: read timed out")

    store.get_machine = unreachable  # type: ignore[method-assign,assignment]
    assert make_reconciler(store, hv).reconcile(KEY) == Outcome(retry=True)


def test_an_image_larger_than_its_disk_is_refused_not_grown_beyond_the_counted_size() -> None:
    # The boot disk asks 1 GiB (reconciling's VM); the image's virtual size is 3 GiB. The overlay
    # used to be grown to 3 GiB, beyond what allocation and the pool's free space counted.
    store = make_store()
    hv = FakeHypervisor(facts=HOST)
    hv.add_volume("vmapi-lab", "guest.qcow2", capacity_bytes=3 << 30)
    make_reconciler(store, hv).reconcile(KEY)
    assert UID not in hv.domains
    assert owned_volumes(hv) == []
    ready = {c["type"]: c for c in store.machines["web"]["status"]["conditions"]}[
        "InfrastructureReady"
    ]
    assert ready["status"] == "False"
    assert "virtual size of 3 GiB, more than disk 'boot' asks (1 GiB)" in ready["message"]
    assert "sizeGiB to at least 3" in ready["message"]


def test_an_overlay_is_made_at_the_disks_size_over_a_smaller_image() -> None:
    store, hv = make_store(), make_hypervisor()
    make_reconciler(store, hv).reconcile(KEY)
    assert hv.volumes[("vmapi-lab", f"{DOMAIN}--boot.qcow2")].capacity_bytes == 1 << 30
