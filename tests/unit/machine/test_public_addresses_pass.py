"""A machine pass and its public addresses: claimed before the domain exists, reserved in the
host's DHCP, reported as ExternalIP, waited for when the pool is empty, released at deletion."""

from __future__ import annotations

import copy
import time
from dataclasses import replace
from typing import Any

from lxml import etree

from libvirt_provider import constants as c
from libvirt_provider.driver.types import DomainState, NetworkDhcp
from libvirt_provider.errors import StateConflictError
from libvirt_provider.machine.reconciler import MachineKey, MachineReconciler
from tests.doubles.hypervisor import FakeHypervisor
from tests.doubles.store import MemoryStore
from tests.support.builders import UID, ref
from tests.support.reconciling import KEY, NS, make_hypervisor, make_reconciler, make_store

Obj = dict[str, Any]
OTHER_UID = "0b7e2a6c-1d3f-4e5a-8b9c-0d1e2f3a4b5c"
PUBLIC = {"interfaces": [{"name": "eth0", "publicIP": True}]}


def pool(start: str = "10.213.0.20", end: str = "10.213.0.20") -> Obj:
    return {"ranges": [{"start": start, "end": end}], "prefixLength": 24}


def world(address_pool: Obj | None = None) -> tuple[MemoryStore, FakeHypervisor]:
    store, hv = make_store(network=PUBLIC), make_hypervisor()
    store.catalog["libvirtnetworks"][0]["spec"]["addressPool"] = address_pool or pool()
    hv.dhcp["vmapi-lab"] = NetworkDhcp(
        network="vmapi-lab",
        ranges=(("10.213.0.100", "10.213.0.250"),),
        subnets=("10.213.0.0/24",),
    )
    return store, hv


def add_pair(store: MemoryStore, name: str, uid: str) -> MachineKey:
    machine = copy.deepcopy(store.machines["web"])
    machine["metadata"].update(name=name, uid=uid)
    machine["metadata"]["annotations"]["vm-api.io/virtual-machine"] = name
    store.machines[name] = machine
    vm = copy.deepcopy(store.vms["web"])
    vm["metadata"].update(name=name, uid=f"vm-{uid}")
    vm["spec"]["infrastructureRef"] = ref("LibvirtMachine", name)
    store.vms[name] = vm
    return MachineKey(NS, name)


def condition(store: MemoryStore, name: str, kind: str = "InfrastructureReady") -> Obj:
    conditions = store.machines[name]["status"]["conditions"]
    return next(x for x in conditions if x["type"] == kind)


def mac_of(hv: FakeHypervisor, uid: str) -> str:
    root = etree.fromstring(hv.domains[uid].xml.encode())
    return str(root.find("devices/interface/mac").get("address"))


def test_a_public_nic_claims_an_address_reserved_before_the_domain_starts() -> None:
    store, hv = world()
    make_reconciler(store, hv).reconcile(KEY)
    (claim,) = store.claims.values()
    assert claim["metadata"]["name"] == "10.213.0.20"
    assert claim["spec"]["parentRef"] == {
        "group": "infrastructure.vm-api.io",
        "resource": "libvirtmachines",
        "namespace": NS,
        "name": "web",
    }
    labels = claim["metadata"]["labels"]
    assert labels[c.CLAIM_MACHINE_UID_LABEL] == UID
    assert labels[c.ADDRESS_MANAGED_BY_LABEL] == c.ADDRESS_MANAGER
    assert dict(hv.dhcp["vmapi-lab"].hosts) == {mac_of(hv, UID): "10.213.0.20"}
    assert hv.calls.index("reserve_address") < hv.calls.index("start")
    assert (c.MACHINE_KIND, c.EVENT_ADDRESS_CLAIMED) in [(k, r) for k, r, _ in store.events]


def test_the_leased_public_address_is_reported_as_external_ip() -> None:
    store, hv = world()
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    hv.give_lease(UID, mac_of(hv, UID), "10.213.0.20")
    reconciler.reconcile(KEY)
    status = store.machines["web"]["status"]
    assert status["addresses"] == [
        {"interface": "eth0", "type": "ExternalIP", "address": "10.213.0.20", "source": "lease"}
    ]
    assert condition(store, "web")["reason"] == c.REASON_RUNNING


def test_a_later_pass_and_a_restarted_daemon_keep_the_one_claim() -> None:
    store, hv = world(pool(end="10.213.0.29"))
    make_reconciler(store, hv).reconcile(KEY)
    make_reconciler(store, hv).reconcile(KEY)
    assert list(store.claims) == ["10.213.0.20"]
    assert hv.calls.count("define") == 1


def test_an_exhausted_pool_makes_the_machine_wait_with_a_reason_and_build_nothing() -> None:
    store, hv = world()
    other = add_pair(store, "db", OTHER_UID)
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    outcome = reconciler.reconcile(other)
    assert outcome.requeue_after == c.ADDRESS_POOL_POLL_SECONDS
    ready = condition(store, "db")
    assert (ready["status"], ready["reason"]) == ("False", c.REASON_ADDRESS_POOL_EXHAUSTED)
    assert "all 1 addresses of the addressPool of LibvirtNetwork 'lab' are held" in ready["message"]
    assert OTHER_UID not in hv.domains
    assert [
        claim["metadata"]["labels"][c.CLAIM_MACHINE_UID_LABEL] for claim in store.claims.values()
    ] == [UID]


def test_deletion_releases_the_reservation_and_the_claim_and_the_waiting_machine_gets_it() -> None:
    store, hv = world()
    other = add_pair(store, "db", OTHER_UID)
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    reconciler.reconcile(other)
    store.machines["web"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    reconciler.reconcile(KEY)
    assert "web" not in store.machines
    assert store.claims == {}
    assert dict(hv.dhcp["vmapi-lab"].hosts) == {}
    assert (c.MACHINE_KIND, c.EVENT_ADDRESS_RELEASED) in [(k, r) for k, r, _ in store.events]
    reconciler.reconcile(other)
    (claim,) = store.claims.values()
    assert claim["metadata"]["labels"][c.CLAIM_MACHINE_UID_LABEL] == OTHER_UID
    assert hv.domains[OTHER_UID].state is DomainState.RUNNING
    assert dict(hv.dhcp["vmapi-lab"].hosts) == {mac_of(hv, OTHER_UID): "10.213.0.20"}


def test_a_claim_whose_machine_is_gone_is_swept_when_the_pool_runs_out() -> None:
    store, hv = world()
    other = add_pair(store, "db", OTHER_UID)
    make_reconciler(store, hv).reconcile(KEY)
    del store.machines["web"]  # its finalizer removed by hand: no teardown ran
    make_reconciler(store, hv).reconcile(other)
    (claim,) = store.claims.values()
    assert claim["metadata"]["labels"][c.CLAIM_MACHINE_UID_LABEL] == OTHER_UID


def test_an_address_another_daemon_took_meanwhile_is_skipped() -> None:
    store, hv = world(pool(end="10.213.0.21"))

    taken = {"done": False}
    create = store.create_address_claim

    def racing_create(body: Obj) -> Obj:
        if not taken["done"]:
            taken["done"] = True
            raise StateConflictError('ipaddresses "10.213.0.20" already exists')
        return create(body)

    store.create_address_claim = racing_create  # type: ignore[method-assign]
    make_reconciler(store, hv).reconcile(KEY)
    assert list(store.claims) == ["10.213.0.21"]


def test_a_shrunk_pool_leaves_the_running_machine_its_address_and_says_so() -> None:
    store, hv = world()
    reconciler = make_reconciler(store, hv)
    reconciler.reconcile(KEY)
    hv.give_lease(UID, mac_of(hv, UID), "10.213.0.20")
    store.catalog["libvirtnetworks"][0]["spec"]["addressPool"] = pool("10.213.0.30", "10.213.0.30")
    reconciler.reconcile(KEY)
    up = condition(store, "web", "UpToDate")
    assert (up["status"], up["reason"]) == ("False", c.REASON_ADDRESS_OUTSIDE_POOL)
    assert "10.213.0.20" in up["message"]
    assert condition(store, "web")["status"] == "True"
    assert list(store.claims) == ["10.213.0.20"]
    assert hv.domains[UID].state is DomainState.RUNNING
    warnings = [r for _k, r, _m in store.events if r == c.REASON_ADDRESS_OUTSIDE_POOL]
    reconciler.reconcile(KEY)
    assert warnings == [r for _k, r, _m in store.events if r == c.REASON_ADDRESS_OUTSIDE_POOL]
    assert len(warnings) == 1


def test_without_a_pool_public_ip_is_unsupported() -> None:
    store, hv = make_store(network=PUBLIC), make_hypervisor()
    make_reconciler(store, hv).reconcile(KEY)
    ready = condition(store, "web")
    assert ready["reason"] == "UnsupportedByProvider"
    assert "declares no addressPool" in ready["message"]
    assert store.claims == {}


def test_an_address_a_gone_guest_still_leases_holds_the_creation_until_the_lease_ends() -> None:
    store, hv = world()
    lab = hv.dhcp["vmapi-lab"]
    hv.dhcp["vmapi-lab"] = replace(
        lab, leases={"10.213.0.20": ("52:54:00:00:00:01", int(time.time()) + 90)}
    )
    reconciler = make_reconciler(store, hv)
    outcome = reconciler.reconcile(KEY)
    ready = condition(store, "web")
    assert (ready["status"], ready["reason"]) == ("False", c.REASON_ADDRESS_STILL_LEASED)
    assert "still leased" in ready["message"]
    assert "52:54:00:00:00:01" in ready["message"]
    assert outcome.requeue_after == c.ADDRESS_POOL_POLL_SECONDS
    assert UID not in hv.domains
    # The reservation is already the machine's, so the guest gets the address once it is free.
    assert list(hv.dhcp["vmapi-lab"].hosts.values()) == ["10.213.0.20"]
    hv.dhcp["vmapi-lab"] = replace(hv.dhcp["vmapi-lab"], leases={})
    reconciler.reconcile(KEY)
    assert hv.domains[UID].state is DomainState.RUNNING


def test_two_daemons_racing_for_the_last_address_give_it_to_one_machine() -> None:
    # Daemon A lists the claims, daemon B claims the last address for its machine, then A's
    # create of the same name fails: A's machine waits, B's holds the address.
    store, hv = world()
    other = add_pair(store, "db", OTHER_UID)
    store.machines["db"]["spec"]["host"] = "node-2"
    other_hv = make_hypervisor()
    other_hv.dhcp = dict(hv.dhcp)
    daemon_b = MachineReconciler(store=store, hypervisor=other_hv, host="node-2")
    create = store.create_address_claim

    def b_first(body: Obj) -> Obj:
        if body["metadata"]["labels"][c.CLAIM_MACHINE_UID_LABEL] == UID:
            store.create_address_claim = create  # type: ignore[method-assign]
            daemon_b.reconcile(other)
        return create(body)

    store.create_address_claim = b_first  # type: ignore[method-assign]
    outcome = make_reconciler(store, hv).reconcile(KEY)
    assert outcome.requeue_after == c.ADDRESS_POOL_POLL_SECONDS
    assert condition(store, "web")["reason"] == c.REASON_ADDRESS_POOL_EXHAUSTED
    (claim,) = store.claims.values()
    assert claim["metadata"]["labels"][c.CLAIM_MACHINE_UID_LABEL] == OTHER_UID
    assert UID not in hv.domains
    assert other_hv.domains[OTHER_UID].state is DomainState.RUNNING
