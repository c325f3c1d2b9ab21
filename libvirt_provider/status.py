"""The LibvirtMachine's status, computed from what the controller observed (pure).

It is the provider's half of the vm-api.io status contract: `powerState`, `providerID`,
`providerMetadata`, `addresses` and the `InfrastructureReady` and `UpToDate` conditions, which the
generic controller mirrors onto the VirtualMachine.

Address rules: each NIC's addresses come from the sources its LibvirtNetwork trusts, matched by
MAC, with the source recorded on each address. While the domain runs, a NIC whose sources answer
with nothing keeps the addresses reported before (a lease being renewed, an agent restarting are
not the guest losing its address); once the domain is not running, no address is reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from catalog.network import AddressSourcePolicy
from generic import constants as vmapi
from generic.conditions import DesiredCondition, merge_conditions
from generic.status import merge_patch
from libvirt_provider.driver.base import AddressSource, InterfaceAddress

__all__ = [
    "NicAddressPlan",
    "Readiness",
    "compute_status",
    "nics_without_address",
    "provider_id",
    "select_addresses",
    "sources_for",
    "status_patch",
    "waiting_for_address_message",
]

_POLICY_SOURCES: dict[AddressSourcePolicy, tuple[AddressSource, ...]] = {
    AddressSourcePolicy.LEASE: (AddressSource.LEASE,),
    AddressSourcePolicy.AGENT: (AddressSource.AGENT,),
    AddressSourcePolicy.ARP: (AddressSource.ARP,),
    AddressSourcePolicy.ANY: (AddressSource.LEASE, AddressSource.AGENT, AddressSource.ARP),
}


def sources_for(policy: AddressSourcePolicy) -> tuple[AddressSource, ...]:
    """The sources to ask, in order of trust."""
    return _POLICY_SOURCES[policy]


def provider_id(host: str, uuid: str) -> str:
    """Stable for the machine's life: the host and the domain UUID, both fixed at creation."""
    return f"libvirt://{host}/{uuid}"


@dataclass(frozen=True)
class NicAddressPlan:
    name: str
    mac: str
    policy: AddressSourcePolicy


def select_addresses(
    nics: Sequence[NicAddressPlan],
    observed: Mapping[AddressSource, Sequence[InterfaceAddress]],
    previous: Sequence[Mapping[str, Any]],
    *,
    running: bool,
) -> list[dict[str, str]]:
    """Addresses per NIC in NIC order: from the first trusted source that knows the MAC."""
    if not running:
        return []
    reported: list[dict[str, str]] = []
    for nic in nics:
        found: list[dict[str, str]] = []
        for source in sources_for(nic.policy):
            matches = [a for a in observed.get(source, ()) if a.mac.lower() == nic.mac.lower()]
            if matches:
                found = [
                    {
                        "interface": nic.name,
                        "type": vmapi.ADDRESS_INTERNAL_IP,
                        "address": a.address,
                        "source": source.value,
                    }
                    for a in sorted(matches, key=lambda a: (a.family != "ipv4", a.address))
                ]
                break
        if not found:
            found = [dict(p) for p in previous if p.get("interface") == nic.name]
        reported.extend(found)
    return reported


def nics_without_address(names: Sequence[str], addresses: Sequence[Mapping[str, Any]]) -> list[str]:
    """The NICs, in order, that no reported address belongs to."""
    known = {a.get("interface") for a in addresses}
    return [name for name in names if name not in known]


def waiting_for_address_message(*, network_data: bool) -> str:
    """Why a running machine is not Ready yet. When the guest configures its NICs from network-data
    the provider wrote, a mistake there (no DHCP, no address, a MAC that matches no NIC) is the
    usual reason none ever appears, so the message says where to look."""
    if not network_data:
        return "running; waiting for the guest's address"
    return (
        "running; waiting for the guest's address. The guest configures its NICs from the "
        "cloud-init network-data (the networkData Secret or the VM's static settings): if no "
        "address appears, that configuration is the likely cause (see the console log)"
    )


@dataclass(frozen=True)
class Readiness:
    """What the controller concluded this pass, in the contract's terms."""

    ready: bool
    reason: str
    message: str
    up_to_date: bool
    up_to_date_reason: str
    up_to_date_message: str


def compute_status(
    *,
    current: Mapping[str, Any] | None,
    power_state: str | None,
    host: str,
    domain_uuid: str | None,
    domain_name: str,
    addresses: list[dict[str, str]],
    readiness: Readiness,
    generation: int | None,
    pending_changes: list[str],
    now: str,
    shutdown_requested_at: str | None = None,
    guest: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The whole status to write; equal to `current` when nothing changed (so no patch is sent)."""
    current = current or {}
    status: dict[str, Any] = {
        "conditions": merge_conditions(
            current.get("conditions"),
            [
                DesiredCondition(
                    type=vmapi.CONDITION_INFRASTRUCTURE_READY,
                    status=vmapi.STATUS_TRUE if readiness.ready else vmapi.STATUS_FALSE,
                    reason=readiness.reason,
                    message=readiness.message,
                ),
                DesiredCondition(
                    type=vmapi.CONDITION_UP_TO_DATE,
                    status=vmapi.STATUS_TRUE if readiness.up_to_date else vmapi.STATUS_FALSE,
                    reason=readiness.up_to_date_reason,
                    message=readiness.up_to_date_message,
                ),
            ],
            generation=generation,
            now=now,
        ),
        "addresses": addresses,
        # Guest facts (libvirt_provider.guest_facts) first: they may never shadow our own keys.
        "providerMetadata": {**(guest or {}), "host": host, "domainName": domain_name},
        "pendingChanges": pending_changes,
    }
    if generation is not None:
        status["observedGeneration"] = generation
    if domain_uuid is not None:
        status["providerID"] = provider_id(host, domain_uuid)
        status["providerMetadata"]["domainUUID"] = domain_uuid
    if power_state is not None:
        status["powerState"] = power_state
    if shutdown_requested_at is not None:
        status["shutdownRequestedAt"] = shutdown_requested_at
    return status


def status_patch(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch turning `current` into `desired`: changed keys, and null for removed ones
    (in nested maps too)."""
    return merge_patch(current or {}, desired)
