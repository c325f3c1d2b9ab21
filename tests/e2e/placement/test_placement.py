"""Placement across the lab's libvirt hosts, one daemon per host, on a real API server.

Machines are created powered off unless a test needs a guest: placement and building (volumes, a
defined domain) are what is checked, and a dozen emulated guests would only slow the lab down.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from libvirt_provider.hosts.inventory import format_size, parse_size
from libvirt_provider.naming import domain_name
from tests.support.daemons import Fleet
from tests.support.factories import pair, unplaced
from tests.support.hosts import host_object, leave_100mi, patch_host, placed_on
from tests.support.kube import (
    GROUP,
    V,
    condition,
    create,
    create_all,
    delete_vm_and_wait,
    get,
    wait_ready,
    wait_reason,
)
from tests.support.lab_access import LabInfo
from tests.support.virt import connections, hosts_defining
from tests.support.waiting import eventually

ZONE = "topology.kubernetes.io/zone"
# Half the usual heartbeat grace: the dead-host and missing-host cases wait out a grace (and up
# to half of one more for the placer's idle pass), 20 s less each; renewals every 5 s keep a
# live host fresh through a loaded API server.
DAEMON_ARGS = ("--heartbeat-grace=20",)


def uid_domain(api: client.ApiClient, ns: str, name: str) -> str:
    obj = get(api, ns, name, vm=False)
    assert obj is not None
    return domain_name(ns, name, str(obj["metadata"]["uid"]))


def waiting(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    """The LibvirtMachine's InfrastructureReady once it says WaitingForCapacity."""
    return wait_reason(api, ns, name, "WaitingForCapacity", what=f"{ns}/{name} waiting")


def events_of(api: client.ApiClient, ns: str, name: str) -> list[tuple[str, str, str]]:
    return [
        (e.type, e.reason, e.message)
        for e in client.CoreV1Api(api).list_namespaced_event(ns).items
        if e.involved_object.name == name
    ]


def test_hosts_are_objects_with_inventory_heartbeat_and_columns(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo
) -> None:
    for host in lab.hosts:
        obj = host_object(api_client, host.name)
        assert obj is not None
        status = obj["status"]
        assert status["capacity"]["cpus"] >= 1
        assert status["allocatable"]["cpus"] == int(status["capacity"]["cpus"] * 4)
        assert lab.network in status["offers"]["networks"]
        assert lab.pool in status["offers"]["pools"]
        assert status["versions"]["libvirt"]
        lease = client.CoordinationV1Api(api_client).read_namespaced_lease(
            f"libvirt-host-{host.name}", "kube-system"
        )
        assert lease.spec.holder_identity == host.name
    # Cheap: a heartbeat renews the Lease; the LibvirtHost is written only when it changes.
    host = lab.hosts[0].name
    version = (host_object(api_client, host) or {})["metadata"]["resourceVersion"]
    leases = client.CoordinationV1Api(api_client)
    renewed = leases.read_namespaced_lease(f"libvirt-host-{host}", "kube-system").spec.renew_time
    eventually(
        lambda: (
            leases.read_namespaced_lease(f"libvirt-host-{host}", "kube-system").spec.renew_time
            > renewed
        ),
        timeout=30,
        what="the next heartbeat",
    )
    assert (host_object(api_client, host) or {})["metadata"]["resourceVersion"] == version
    shapes = {h.name: host_object(api_client, h.name)["status"]["offers"] for h in lab.hosts}  # type: ignore[index]
    assert [n for n, o in shapes.items() if lab.only_network in o["networks"]] == [
        lab.hosts[1].name
    ]
    assert [n for n, o in shapes.items() if lab.extra_pool in o["pools"]] == [lab.hosts[2].name]


def test_unplaced_machines_spread_evenly_and_are_built_where_placed(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    names = [f"spread-{i}" for i in range(12)]
    create_all(api_client, [unplaced(ns, n) for n in names])
    placed = {n: placed_on(api_client, ns, n) for n in names}
    counts = Counter(placed.values())
    assert set(counts) == set(fleet.names), counts
    assert max(counts.values()) - min(counts.values()) <= 1, counts
    with connections(lab) as conns:
        for n, host in placed.items():
            domain = uid_domain(api_client, ns, n)
            eventually(
                lambda d=domain: hosts_defining(conns, d),
                timeout=90,
                what=f"{n}'s domain defined",
            )
            assert hosts_defining(conns, domain) == [host]
    for host, count in counts.items():
        eventually(
            lambda h=host, k=count: (
                (host_object(api_client, h) or {})
                .get("status", {})
                .get("allocated", {})
                .get("machines")
                == k
            ),
            timeout=60,
            what=f"LibvirtHost {host} counting its {count} machines",
        )
    # The label that shards the daemons follows spec.host.
    for n, host in placed.items():
        obj = get(api_client, ns, n, vm=False)
        assert obj is not None
        assert obj["metadata"]["labels"][c.HOST_LABEL] == host


def test_a_machine_needing_a_network_only_one_host_has_lands_there(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    network = {
        "apiVersion": f"{GROUP}/{V}",
        "kind": "LibvirtNetwork",
        "metadata": {"name": f"only-{ns}"},
        "spec": {"source": {"network": lab.only_network}},
    }
    custom = client.CustomObjectsApi(api_client)
    custom.create_cluster_custom_object(GROUP, V, "libvirtnetworks", network)
    try:
        only = {"apiGroup": GROUP, "kind": "LibvirtNetwork", "name": f"only-{ns}"}
        spec = {"network": {"interfaces": [{"name": "eth0", "network": only}]}}
        for i in range(3):
            create(api_client, unplaced(ns, f"only-{i}", vm_spec=spec))
        assert {placed_on(api_client, ns, f"only-{i}") for i in range(3)} == {lab.hosts[1].name}
    finally:
        custom.delete_cluster_custom_object(GROUP, V, "libvirtnetworks", f"only-{ns}")


def test_failure_domain_by_host_and_by_zone(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    h0, h1, h2 = (h.name for h in lab.hosts[:3])
    patch_host(api_client, h1, {"metadata": {"labels": {ZONE: "zone-b"}}})
    patch_host(api_client, h2, {"metadata": {"labels": {ZONE: "zone-b"}}})
    create(api_client, unplaced(ns, "by-host", vm_spec={"failureDomain": h0}))
    assert placed_on(api_client, ns, "by-host") == h0
    for i in range(4):
        create(api_client, unplaced(ns, f"by-zone-{i}", vm_spec={"failureDomain": "zone-b"}))
    assert {placed_on(api_client, ns, f"by-zone-{i}") for i in range(4)} == {h1, h2}


def test_host_selector_and_spread_group(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    h0, h1, h2 = (h.name for h in lab.hosts[:3])
    patch_host(api_client, h0, {"metadata": {"labels": {"disk": "ssd"}}})
    patch_host(api_client, h2, {"metadata": {"labels": {"disk": "ssd"}}})
    selector = {"placement": {"hostSelector": {"matchLabels": {"disk": "ssd"}}}}
    for i in range(4):
        create(api_client, unplaced(ns, f"ssd-{i}", lm_spec=selector))
    assert {placed_on(api_client, ns, f"ssd-{i}") for i in range(4)} == {h0, h2}
    # Load h1 so that least-allocated alone would never pick it; the group still spreads there.
    group = {"placement": {"spreadGroup": "db"}}
    for i in range(3):
        create(api_client, unplaced(ns, f"db-{i}", lm_spec=group))
        placed_on(api_client, ns, f"db-{i}")
    hosts = [placed_on(api_client, ns, f"db-{i}") for i in range(3)]
    assert sorted(hosts) == sorted([h0, h1, h2])
    create(api_client, unplaced(ns, "db-3", lm_spec=group))
    placed_on(api_client, ns, "db-3")
    eventually(
        lambda: any(
            r == c.EVENT_SPREAD_NOT_HONOURED for _, r, _m in events_of(api_client, ns, "db-3")
        ),
        timeout=30,
        what="a SpreadNotHonoured Event for the group's fourth machine",
    )


def test_a_full_host_is_skipped(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    h0 = lab.hosts[0].name
    memory = host_object(api_client, h0)["status"]["capacity"]["memory"]  # type: ignore[index]
    # Everything but 100Mi reserved: no 256Mi machine fits on h0.
    reserve = format_size(parse_size(memory) - 100 * 2**20)
    patch_host(api_client, h0, {"spec": {"reserved": {"memory": reserve}}})
    eventually(
        lambda: (host_object(api_client, h0) or {})["status"]["allocatable"]["memory"] == "100Mi",
        timeout=30,
        what=f"{h0}'s allocatable memory down to 100Mi",
    )
    for i in range(6):
        create(api_client, unplaced(ns, f"full-{i}"))
    assert h0 not in {placed_on(api_client, ns, f"full-{i}") for i in range(6)}


def test_nothing_fits_waits_with_the_message_then_is_placed_when_a_host_is_uncordoned(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    for host in lab.hosts:
        patch_host(api_client, host.name, {"spec": {"unschedulable": True}})
    create(api_client, unplaced(ns, "patient", running=True))
    cond = waiting(api_client, ns, "patient")
    total = len(lab.hosts)
    assert cond["message"] == f"0/{total} hosts fit: {total} cordoned"
    vm_cond = wait_reason(
        api_client,
        ns,
        "patient",
        "WaitingForCapacity",
        vm=True,
        timeout=30,
        what="the VM saying WaitingForCapacity too",
    )
    assert "cordoned" in vm_cond["message"]
    warnings = [e for e in events_of(api_client, ns, "patient") if e[1] == "WaitingForCapacity"]
    assert warnings
    assert warnings[0][0] == "Warning"
    with connections(lab) as conns:
        assert hosts_defining(conns, uid_domain(api_client, ns, "patient")) == []
    target = lab.hosts[1].name
    patch_host(api_client, target, {"spec": {"unschedulable": False}})
    assert placed_on(api_client, ns, "patient") == target
    wait_ready(api_client, ns, "patient", what="the placed machine booted and Ready")


def test_a_waiting_machine_is_told_by_counts_once_then_placed_when_memory_frees(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    """The message names no host and no free figure, a capacity change that changes no reason
    writes nothing, and freeing memory places the machine (booted, as a user would run it)."""
    cordoned, *full = (h.name for h in lab.hosts)
    patch_host(api_client, cordoned, {"spec": {"unschedulable": True}})
    for host in full:
        leave_100mi(api_client, host)
    create(api_client, unplaced(ns, "patient", running=True))
    cond = waiting(api_client, ns, "patient")
    assert cond["message"] == (
        f"0/{len(lab.hosts)} hosts fit: {len(full)} insufficient memory (needs 256Mi), 1 cordoned"
    )
    for named in lab.hosts:
        assert named.name not in cond["message"]
    version = get(api_client, ns, "patient", vm=False)["metadata"]["resourceVersion"]  # type: ignore[index]
    # A capacity change that changes no reason: the machine is looked at again, nothing written.
    patch_host(api_client, full[0], {"metadata": {"labels": {"example.com/rack": "r1"}}})
    # Reports are written in order on one thread, and a machine created now is decided in a pass
    # after the one the label woke: once the latecomer's report is there, the patient's would be.
    for late in ("late-1", "late-2"):
        create(api_client, unplaced(ns, late))
        waiting(api_client, ns, late)
    assert get(api_client, ns, "patient", vm=False)["metadata"]["resourceVersion"] == version  # type: ignore[index]
    warnings = [
        (e.count, e.message)
        for e in client.CoreV1Api(api_client).list_namespaced_event(ns).items
        if e.involved_object.kind == "LibvirtMachine"
        and e.involved_object.name == "patient"
        and e.reason == "WaitingForCapacity"
    ]
    assert len(warnings) == 1, warnings
    assert warnings[0][0] in (None, 1), warnings
    patch_host(api_client, full[-1], {"spec": {"reserved": {"memory": "0"}}})
    assert placed_on(api_client, ns, "patient") == full[-1]
    wait_ready(api_client, ns, "patient", what="the placed machine booted and Ready")


def test_a_one_sided_link_is_said_on_the_machine(
    fleet: Fleet, api_client: client.ApiClient, ns: str
) -> None:
    _vm, alone = unplaced(ns, "alone")
    del alone["metadata"]["annotations"]["vm-api.io/virtual-machine"]
    _vm, orphan = unplaced(ns, "orphan")  # names a VM that does not exist
    vm, _lm = unplaced(ns, "other")
    _vm, jilted = unplaced(ns, "jilted")
    jilted["metadata"]["annotations"]["vm-api.io/virtual-machine"] = "other"
    create(api_client, [alone, orphan, jilted, vm])
    for name, reason, said in (
        ("alone", c.REASON_NOT_LINKED, "annotation vm-api.io/virtual-machine is missing"),
        ("orphan", c.REASON_VIRTUAL_MACHINE_NOT_FOUND, "'orphan'"),
        ("jilted", c.REASON_LINK_MISMATCH, "not to this LibvirtMachine"),
    ):
        cond = wait_reason(api_client, ns, name, reason, timeout=60, what=f"{name}: {reason}")
        assert said in cond["message"]
        assert cond["status"] == "False"
        assert (get(api_client, ns, name, vm=False) or {})["spec"].get("host") is None


def test_daemons_started_together_place_a_burst_without_overcommitting_a_host(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    burst, per_host = 30, 8
    # 8 vCPUs allocatable on every host, whatever its CPU count: 24 of the 30 fit.
    for host in lab.hosts:
        cpus = (host_object(api_client, host.name) or {})["status"]["capacity"]["cpus"]
        patch_host(api_client, host.name, {"spec": {"overcommit": {"cpu": per_host / cpus}}})
    fleet.stop_all()
    fleet.start_together(lab.hosts)
    create_all(api_client, [unplaced(ns, f"burst-{i}") for i in range(burst)])
    room = per_host * len(lab.hosts)
    eventually(
        lambda: (
            sum(
                1
                for i in range(burst)
                if condition(
                    get(api_client, ns, f"burst-{i}", vm=False), "InfrastructureReady"
                ).get("reason")
                == "WaitingForCapacity"
            )
            == burst - room
        ),
        timeout=180,
        what=f"{burst - room} of {burst} machines waiting for capacity",
    )
    placed = Counter(
        str((get(api_client, ns, f"burst-{i}", vm=False) or {}).get("spec", {}).get("host"))
        for i in range(burst)
    )
    for host in lab.hosts:
        allocatable = (host_object(api_client, host.name) or {})["status"]["allocatable"]["cpus"]
        assert allocatable == per_host
        assert placed[host.name] == per_host, placed


def test_a_pinned_machine_is_left_where_the_user_put_it(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    target = lab.hosts[2].name
    docs = unplaced(ns, "pinned", lm_spec={"host": target})
    create(api_client, docs)
    obj = eventually(
        lambda: (
            (o := get(api_client, ns, "pinned", vm=False))
            and (o["metadata"].get("labels") or {}).get(c.HOST_LABEL) == target
            and o
        ),
        timeout=60,
        what="the pinned machine's host label derived from spec.host",
    )
    assert obj["spec"]["host"] == target
    with connections(lab) as conns:
        domain = uid_domain(api_client, ns, "pinned")
        eventually(
            lambda: hosts_defining(conns, domain) == [target],
            timeout=90,
            what="the pinned machine built on its host",
        )
    with pytest.raises(ApiException) as refused:
        client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
            GROUP, V, ns, "libvirtmachines", "pinned", {"spec": {"host": lab.hosts[0].name}}
        )
    assert refused.value.status == 422
    assert "host is immutable once set" in str(refused.value.body)


def test_bad_placement_input_is_reported_and_nothing_is_created(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    nothing = {"placement": {"hostSelector": {"matchLabels": {"gpu": "yes"}}}}
    create(api_client, unplaced(ns, "no-match", lm_spec=nothing))
    create(api_client, unplaced(ns, "no-zone", vm_spec={"failureDomain": "zone-nowhere"}))
    total = len(lab.hosts)
    assert waiting(api_client, ns, "no-match")["message"] == (
        f"0/{total} hosts fit: {total} not matching hostSelector"
    )
    assert waiting(api_client, ns, "no-zone")["message"] == (
        f"0/{total} hosts fit: {total} not in failure domain zone-nowhere"
    )
    with pytest.raises(ApiException) as refused:
        patch_host(api_client, lab.hosts[0].name, {"spec": {"overcommit": {"cpu": 0}}})
    assert refused.value.status == 422
    with connections(lab) as conns:
        for name in ("no-match", "no-zone"):
            assert hosts_defining(conns, uid_domain(api_client, ns, name)) == []


def test_a_users_edit_of_a_hosts_status_is_put_back(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo
) -> None:
    name = lab.hosts[0].name
    before = (host_object(api_client, name) or {})["status"]["allocatable"]
    client.CustomObjectsApi(api_client).patch_cluster_custom_object_status(
        GROUP, V, "libvirthosts", name, {"status": {"allocatable": {"cpus": 999}}}
    )
    eventually(
        lambda: (host_object(api_client, name) or {})["status"]["allocatable"] == before,
        timeout=30,
        what="the daemon putting its figures back",
    )


def test_a_machine_on_a_dead_host_is_reported_and_not_moved(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    victim = next(h for h in lab.hosts if h.name != fleet.leader())
    create(api_client, unplaced(ns, "stranded", lm_spec={"host": victim.name}))
    wait_reason(
        api_client, ns, "stranded", "PoweredOff", timeout=90, what="the machine built on its host"
    )
    fleet.stop(victim.name, kill=True)
    try:
        cond = wait_reason(
            api_client,
            ns,
            "stranded",
            c.REASON_HOST_NOT_READY,
            vm=True,
            timeout=120,
            what="the VM saying its host is not ready",
        )
        assert cond["status"] == "Unknown"
        obj = get(api_client, ns, "stranded", vm=False)
        assert obj is not None
        assert obj["spec"]["host"] == victim.name
        # A new machine is not placed on the dead host.
        create(api_client, unplaced(ns, "newcomer"))
        assert placed_on(api_client, ns, "newcomer") != victim.name
    finally:
        fleet.start(victim)
        fleet.wait_hosts_ready([victim.name])
    wait_reason(
        api_client,
        ns,
        "stranded",
        "PoweredOff",
        timeout=90,
        what="the machine reported by its host's daemon again",
    )


def test_a_machine_pinned_to_a_host_that_does_not_exist_is_reported(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    create(api_client, unplaced(ns, "ghost", lm_spec={"host": "ghost-host"}))
    cond = wait_reason(
        api_client,
        ns,
        "ghost",
        c.REASON_HOST_NOT_READY,
        vm=True,
        timeout=120,
        what="the VM saying its host does not exist",
    )
    assert "no LibvirtHost named ghost-host exists" in cond["message"]
    with connections(lab) as conns:
        assert hosts_defining(conns, uid_domain(api_client, ns, "ghost")) == []
    # Nobody can remove its finalizer but a daemon of that host: delete it without one.
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        GROUP, V, ns, "libvirtmachines", "ghost", {"metadata": {"finalizers": None}}
    )


def test_a_leader_killed_right_after_binding_leaves_the_machine_placed_once(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    fleet.stop_all()
    first = lab.hosts[0]
    crashing = fleet.start(first, crash_point="place:after-bind")
    try:
        eventually(
            lambda: "leads: starting the generic controller" in crashing.log.read_text(),
            timeout=60,
            what="the crash-pointed daemon leading",
        )
        create(api_client, unplaced(ns, "once"))
        eventually(lambda: crashing.proc.poll() is not None, timeout=60, what="the crash")
        bound = placed_on(api_client, ns, "once")
    finally:
        fleet.daemons.pop(first.name, None)
        for host in lab.hosts:
            fleet.start(host)
    fleet.wait_hosts_ready()
    with connections(lab) as conns:
        domain = uid_domain(api_client, ns, "once")
        eventually(
            lambda: hosts_defining(conns, domain) == [bound],
            timeout=90,
            what="the machine built once, on the host it was bound to",
        )
    obj = get(api_client, ns, "once", vm=False)
    assert obj is not None
    assert obj["spec"]["host"] == bound


def test_the_leaders_death_hands_placement_to_another_daemon(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    leader = fleet.leader()
    fleet.stop(leader, kill=True)
    try:
        create(api_client, unplaced(ns, "after-leader"))
        placed_on(api_client, ns, "after-leader", timeout=90)
        successor = fleet.leader()
        assert successor != leader
        # The new leader bound it (the dead one's heartbeat may still be fresh, so the machine
        # may well be placed on its host: within the 40 s grace it counts as ready).
        assert f"placed {ns}/after-leader on host" in fleet.daemons[successor].log.read_text()
    finally:
        fleet.start(next(h for h in lab.hosts if h.name == leader))
        fleet.wait_hosts_ready([leader])


def test_the_label_alone_still_pins_and_spec_host_is_recorded(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    target = lab.hosts[0].name
    vm, lm = pair(ns, "labelled", vm_spec={"powerState": "PoweredOff"})
    lm["metadata"]["labels"][c.HOST_LABEL] = target
    lm["spec"].pop("host", None)
    create(api_client, [vm, lm])
    eventually(
        lambda: (
            ((get(api_client, ns, "labelled", vm=False) or {}).get("spec") or {}).get("host")
            == target
        ),
        timeout=60,
        what="spec.host recorded from the label",
    )


def test_a_relabel_moves_nothing_and_deleting_finishes_on_the_machines_host(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    create(api_client, unplaced(ns, "anchored", running=True))
    home = placed_on(api_client, ns, "anchored")
    wait_ready(api_client, ns, "anchored", what="the placed machine Ready")
    other = next(h.name for h in lab.hosts if h.name != home)
    custom = client.CustomObjectsApi(api_client)

    def relabel() -> None:
        custom.patch_namespaced_custom_object(
            GROUP,
            V,
            ns,
            "libvirtmachines",
            "anchored",
            {"metadata": {"labels": {c.HOST_LABEL: other}}},
        )

    def label() -> str | None:
        obj = get(api_client, ns, "anchored", vm=False) or {}
        return (obj["metadata"].get("labels") or {}).get(c.HOST_LABEL)

    def counted(host: str) -> int:
        status = (host_object(api_client, host) or {}).get("status") or {}
        return int((status.get("allocated") or {}).get("machines") or 0)

    relabel()
    eventually(
        lambda: (
            label() == home
            and any(r == "HostLabelRestored" for _, r, _ in events_of(api_client, ns, "anchored"))
        ),
        timeout=60,
        what="the label set back to spec.host with a HostLabelRestored Event",
    )
    assert (
        condition(get(api_client, ns, "anchored", vm=False), "InfrastructureReady")["reason"]
        == "Running"
    )
    # Still counted on its own host (other tests' namespaces may still be going away meanwhile).
    assert counted(home) >= 1

    with connections(lab) as conns:
        domain = uid_domain(api_client, ns, "anchored")
        assert hosts_defining(conns, domain) == [home]
        relabel()
        delete_vm_and_wait(api_client, ns, "anchored", what="the relabelled pair deleted")
        eventually(
            lambda: hosts_defining(conns, domain) == [],
            timeout=30,
            what="the domain gone from its host",
        )
