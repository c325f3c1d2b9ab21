"""The LibvirtMachine's contract status: addresses per NIC by MAC, conditions, minimal patches."""

from __future__ import annotations

from typing import Any

from catalog.network import AddressSourcePolicy
from generic.formats import merge_patch
from libvirt_provider.constants import ADDRESSES_PER_NIC, MAX_REPORTED_ADDRESSES
from libvirt_provider.driver.types import AddressSource, InterfaceAddress
from libvirt_provider.machine.status import (
    NicAddressPlan,
    Readiness,
    compute_status,
    provider_id,
    select_addresses,
    waiting_for_address_message,
)

MAC0 = "52:54:00:00:00:01"
MAC1 = "52:54:00:00:00:02"
NICS = [
    NicAddressPlan("eth0", MAC0, AddressSourcePolicy.LEASE),
    NicAddressPlan("eth1", MAC1, AddressSourcePolicy.ANY),
]


def addr(mac: str, ip: str, source: AddressSource, family: str = "ipv4") -> InterfaceAddress:
    return InterfaceAddress(mac=mac, address=ip, prefix=24, family=family, source=source)


def test_addresses_are_matched_by_mac_and_carry_their_source() -> None:
    observed = {
        AddressSource.LEASE: [addr(MAC0.upper(), "10.0.0.5", AddressSource.LEASE)],
        AddressSource.ARP: [addr(MAC1, "10.0.1.7", AddressSource.ARP)],
    }
    got = select_addresses(NICS, observed, [], running=True)
    assert got == [
        {"interface": "eth0", "type": "InternalIP", "address": "10.0.0.5", "source": "lease"},
        {"interface": "eth1", "type": "InternalIP", "address": "10.0.1.7", "source": "arp"},
    ]


def test_a_nic_trusting_only_leases_ignores_other_sources() -> None:
    observed = {AddressSource.ARP: [addr(MAC0, "10.0.0.9", AddressSource.ARP)]}
    assert select_addresses(NICS[:1], observed, [], running=True) == []


def test_any_prefers_lease_then_agent_then_arp() -> None:
    observed = {
        AddressSource.AGENT: [addr(MAC1, "10.0.1.2", AddressSource.AGENT)],
        AddressSource.ARP: [addr(MAC1, "10.0.1.3", AddressSource.ARP)],
    }
    got = select_addresses(NICS[1:], observed, [], running=True)
    assert [(a["address"], a["source"]) for a in got] == [("10.0.1.2", "agent")]


def test_ipv4_comes_before_ipv6() -> None:
    observed = {
        AddressSource.LEASE: [
            addr(MAC0, "fd00::5", AddressSource.LEASE, family="ipv6"),
            addr(MAC0, "10.0.0.5", AddressSource.LEASE),
        ]
    }
    got = select_addresses(NICS[:1], observed, [], running=True)
    assert [a["address"] for a in got] == ["10.0.0.5", "fd00::5"]


def test_a_transient_empty_answer_keeps_known_addresses_while_running() -> None:
    previous = [{"interface": "eth0", "type": "InternalIP", "address": "10.0.0.5"}]
    assert select_addresses(NICS[:1], {}, previous, running=True) == previous


def test_a_stopped_machine_has_no_addresses() -> None:
    previous = [{"interface": "eth0", "type": "InternalIP", "address": "10.0.0.5"}]
    observed = {AddressSource.LEASE: [addr(MAC0, "10.0.0.5", AddressSource.LEASE)]}
    assert select_addresses(NICS, observed, previous, running=False) == []


def test_a_guest_reporting_hundreds_of_addresses_stays_within_the_status_bound() -> None:
    # Ten NICs (the most a VM has), each with 100 addresses from the agent: the status used to
    # carry all 1,000 and every write failed the CRD's bound of 64.
    nics = [
        NicAddressPlan(f"eth{n}", f"52:54:00:00:01:{n:02x}", AddressSourcePolicy.AGENT)
        for n in range(10)
    ]
    observed = {
        AddressSource.AGENT: [
            addr(nic.mac, f"10.{n}.0.{i}", AddressSource.AGENT)
            for n, nic in enumerate(nics)
            for i in range(1, 101)
        ]
    }
    got = select_addresses(nics, observed, [], running=True)
    assert len(got) == 10 * ADDRESSES_PER_NIC <= MAX_REPORTED_ADDRESSES
    assert {a["interface"] for a in got} == {nic.name for nic in nics}


def test_the_agent_is_believed_only_for_addresses_that_can_be_the_guests_own() -> None:
    nic = NicAddressPlan("eth1", MAC1, AddressSourcePolicy.AGENT)
    observed = {
        AddressSource.AGENT: [
            addr(MAC1, ip, AddressSource.AGENT)
            for ip in ("127.0.0.1", "169.254.1.1", "224.0.0.1", "0.0.0.0", "not-an-ip")
        ]
        + [addr(MAC1, ip, AddressSource.AGENT, family="ipv6") for ip in ("fe80::1", "::1")]
    }
    assert select_addresses([nic], observed, [], running=True) == []


def test_a_network_naming_its_subnets_bounds_what_the_agent_and_arp_may_claim() -> None:
    nic = NicAddressPlan(
        "eth1", MAC1, AddressSourcePolicy.ANY, subnets=("10.0.1.0/24", "fd01::/64")
    )
    claimed = [
        addr(MAC1, "10.0.1.7", AddressSource.AGENT),
        addr(MAC1, "10.9.9.9", AddressSource.AGENT),  # another tenant's, say
        addr(MAC1, "fd01::7", AddressSource.AGENT, family="ipv6"),
        addr(MAC1, "fd02::7", AddressSource.AGENT, family="ipv6"),
    ]
    got = select_addresses([nic], {AddressSource.AGENT: claimed}, [], running=True)
    assert [a["address"] for a in got] == ["10.0.1.7", "fd01::7"]
    arp = {AddressSource.ARP: [addr(MAC1, "192.168.5.5", AddressSource.ARP)]}
    assert select_addresses([nic], arp, [], running=True) == []


def test_a_libvirt_networks_lease_is_taken_as_it_is() -> None:
    nic = NicAddressPlan("eth0", MAC0, AddressSourcePolicy.LEASE, subnets=("10.0.1.0/24",))
    observed = {AddressSource.LEASE: [addr(MAC0, "10.0.0.5", AddressSource.LEASE)]}
    got = select_addresses([nic], observed, [], running=True)
    assert [a["address"] for a in got] == ["10.0.0.5"]


READY = Readiness(True, "Running", "ok", True, "UpToDate", "matches")


def status(current: dict[str, Any] | None, now: str, ready: Readiness = READY) -> dict[str, Any]:
    return compute_status(
        current=current,
        power_state="PoweredOn",
        host="h1",
        domain_uuid="u-1",
        domain_name="ns_vm-1234",
        addresses=[],
        readiness=ready,
        generation=3,
        pending_changes=[],
        now=now,
    )


def test_status_carries_the_contract_fields() -> None:
    s = status(None, "t1")
    assert s["providerID"] == provider_id("h1", "u-1") == "libvirt://h1/u-1"
    assert s["providerMetadata"] == {"host": "h1", "domainName": "ns_vm-1234", "domainUUID": "u-1"}
    assert s["powerState"] == "PoweredOn"
    assert s["observedGeneration"] == 3
    types = {c["type"]: c for c in s["conditions"]}
    assert types["InfrastructureReady"]["status"] == "True"
    assert types["UpToDate"]["status"] == "True"


def test_an_unchanged_status_needs_no_patch_and_keeps_transition_times() -> None:
    first = status(None, "t1")
    again = status(first, "t2")
    assert again == first
    assert merge_patch(first, again) is None


def test_transition_time_moves_only_when_the_status_flips() -> None:
    first = status(None, "t1")
    not_ready = Readiness(False, "Starting", "booting", True, "UpToDate", "matches")
    second = status(first, "t2", not_ready)
    by_type = {c["type"]: c for c in second["conditions"]}
    assert by_type["InfrastructureReady"]["lastTransitionTime"] == "t2"
    assert by_type["UpToDate"]["lastTransitionTime"] == "t1"
    patch = merge_patch(first, second)
    assert set(patch) == {"conditions"}


def test_a_removed_field_is_nulled_in_the_patch() -> None:
    assert merge_patch({"powerState": "PoweredOn", "a": 1}, {"a": 1}) == {"powerState": None}


def test_pending_changes_stay_within_the_crds_bounds() -> None:
    status = compute_status(
        current=None,
        power_state="PoweredOn",
        host="h",
        domain_uuid="u",
        domain_name="d",
        addresses=[],
        readiness=Readiness(True, "Running", "m", False, "RequiresPowerOff", "m"),
        generation=1,
        pending_changes=[f"change {i} " + "x" * 2000 for i in range(71)],
        now="2026-01-01T00:00:00Z",
    )
    pending = status["pendingChanges"]
    assert len(pending) == 64
    assert all(len(item) <= 1024 for item in pending)
    assert pending[-1] == "... and 8 more changes"


def test_a_key_leaving_a_nested_map_is_nulled_there() -> None:
    # A merge patch merges maps at every depth: only a null removes a key from providerMetadata.
    before = {"providerMetadata": {"host": "h", "guestAgent": "connected"}, "a": 1}
    after = {"providerMetadata": {"host": "h"}, "a": 1}
    assert merge_patch(before, after) == {"providerMetadata": {"guestAgent": None}}


def test_waiting_for_an_address_names_the_network_data_only_when_there_is_some() -> None:
    assert "network-data" not in waiting_for_address_message(network_data=False)
    message = waiting_for_address_message(network_data=True)
    assert "networkData Secret" in message
    assert "likely cause" in message
