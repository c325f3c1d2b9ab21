"""The LibvirtMachine's status, computed from what the controller observed (pure).

It is the provider's half of the vm-api.io status contract: `powerState`, `providerID`,
`providerMetadata`, `addresses` and the `InfrastructureReady` and `UpToDate` conditions, which the
generic controller mirrors onto the VirtualMachine.

Address rules: each NIC's addresses come from the sources its LibvirtNetwork trusts, matched by
MAC, with the source recorded on each address. While the domain runs, a NIC whose sources answer
with nothing keeps the addresses reported before (a lease being renewed, an agent restarting are
not the guest losing its address); once the domain is not running, no address is reported.

What the guest controls (its agent's answers, and the ARP entries it makes the host learn) is
believed only for addresses that could be its own on that network: never loopback, link-local,
multicast or unspecified ones, and only inside the network's `subnets` when it names them. A
libvirt network's leases are the host's own record and are taken as they are. Each NIC reports
at most `ADDRESSES_PER_NIC` addresses (IPv4 first), so ten NICs stay within the status's bound.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from catalog.network import AddressSourcePolicy
from generic import constants as vmapi
from generic.api import PowerState
from generic.conditions import DesiredCondition, merge_conditions
from libvirt_provider import constants as c
from libvirt_provider.driver.types import AddressSource, InterfaceAddress
from libvirt_provider.resolved import ResolvedMachine

__all__ = [
    "TRANSIENT_GRACE",
    "NicAddressPlan",
    "Readiness",
    "assess_readiness",
    "compute_status",
    "created_on",
    "failed",
    "nics_without_address",
    "problem_reason",
    "provider_id",
    "recorded_retained",
    "retained_record",
    "retained_volumes",
    "select_addresses",
    "sources_for",
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


def created_on(status: Mapping[str, Any] | None) -> str | None:
    """The host whose daemon created the machine's domain, from its providerID; None before."""
    reported = (status or {}).get("providerID")
    if not isinstance(reported, str) or not reported.startswith("libvirt://"):
        return None
    host, _, uuid = reported.removeprefix("libvirt://").partition("/")
    return host if host and uuid else None


@dataclass(frozen=True)
class NicAddressPlan:
    name: str
    mac: str
    policy: AddressSourcePolicy
    subnets: tuple[str, ...] = ()
    """The network's subnets; empty: any address the rules above let through."""
    public: str | None = None
    """The public address the NIC holds from its network's pool: reported as ExternalIP."""


def _believed(address: InterfaceAddress, nic: NicAddressPlan) -> bool:
    """Whether `address`, as reported, could be the guest's own on the NIC's network."""
    if address.source is AddressSource.LEASE:
        return True
    try:
        ip = ipaddress.ip_address(address.address)
    except ValueError:
        return False
    if ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified:
        return False
    if not nic.subnets:
        return True
    return any(
        ip in network
        for network in (ipaddress.ip_network(text, strict=False) for text in nic.subnets)
        if network.version == ip.version
    )


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
            matches = [
                a
                for a in observed.get(source, ())
                if a.mac.lower() == nic.mac.lower() and _believed(a, nic)
            ]
            if matches:
                found = [
                    {
                        "interface": nic.name,
                        "type": vmapi.ADDRESS_EXTERNAL_IP
                        if a.address == nic.public
                        else vmapi.ADDRESS_INTERNAL_IP,
                        "address": a.address,
                        "source": source.value,
                    }
                    for a in sorted(matches, key=lambda a: (a.family != "ipv4", a.address))
                ]
                break
        if not found:
            found = [dict(p) for p in previous if p.get("interface") == nic.name]
        reported.extend(found[: c.ADDRESSES_PER_NIC])
    return reported[: c.MAX_REPORTED_ADDRESSES]


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


def assess_readiness(
    *,
    desired: PowerState,
    settled: bool,
    problem: str | None,
    power_state: str | None,
    has_addresses: bool,
    waiting_for_image: str | None,
    pending: Sequence[str],
    network_data: bool = False,
    outside_pool: Sequence[str] = (),
) -> Readiness:
    """The two conditions for a machine whose domain exists, from what this pass saw.
    `outside_pool` names the public addresses the machine holds that its network's pool no
    longer contains: kept (nothing running is disturbed), and said in UpToDate."""
    if waiting_for_image is not None:
        up = (False, c.REASON_IMPORTING_IMAGE, waiting_for_image)
    elif pending:
        up = (
            False,
            vmapi.REASON_REQUIRES_POWER_OFF,
            "applied at the next power-off: " + "; ".join(pending),
        )
    elif outside_pool:
        up = (
            False,
            c.REASON_ADDRESS_OUTSIDE_POOL,
            "the machine keeps public addresses its network's addressPool no longer contains "
            "(the pool was shrunk), until it is deleted: " + "; ".join(outside_pool),
        )
    else:
        up = (True, c.REASON_UP_TO_DATE, "the domain matches the spec")
    if problem is not None and not settled:
        ready = (False, c.REASON_GUEST_NOT_COMPLYING, problem)
    elif not settled:
        reason = c.REASON_STARTING if desired == vmapi.POWERED_ON else c.REASON_STOPPING
        ready = (False, reason, f"moving to {desired}; now {power_state or 'in transition'}")
    elif desired == vmapi.POWERED_ON and not has_addresses:
        ready = (
            False,
            c.REASON_WAITING_FOR_ADDRESS,
            waiting_for_address_message(network_data=network_data),
        )
    elif desired == vmapi.POWERED_ON:
        ready = (True, c.REASON_RUNNING, "running and reachable")
    elif desired == vmapi.SUSPENDED:
        ready = (True, c.REASON_SUSPENDED, problem or "suspended (memory saved to disk)")
    else:
        ready = (True, c.REASON_POWERED_OFF, "powered off as requested")
    return Readiness(*ready, *up)


def failed(reason: str, message: str) -> Readiness:
    """Both conditions False for a problem that stops the machine from converging."""
    return Readiness(
        ready=False,
        reason=reason,
        message=message,
        up_to_date=False,
        up_to_date_reason=reason,
        up_to_date_message=message,
    )


# How long a failure libvirt calls transient may last before it is reported as terminal.
TRANSIENT_GRACE = dt.timedelta(minutes=5)


def problem_reason(*, retryable: bool, failing_for: dt.timedelta) -> str:
    """The condition reason for a failed step.

    A failure that usually passes (libvirtd restarting, a timeout) is `Retrying` at first: not
    terminal, so it stays out of the VM's failureReason. Once the same machine has failed that
    way for `TRANSIENT_GRACE` it is the contract's terminal ProviderError, since it is not passing
    by itself (a missing folder and a permission are system errors too) and a human must look.
    """
    if retryable and failing_for < TRANSIENT_GRACE:
        return c.REASON_RETRYING
    return vmapi.REASON_PROVIDER_ERROR


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
    retained_volumes: Sequence[str] | None = None,
    disks: Sequence[Mapping[str, Any]] | None = None,
    restore_held: bool = False,
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
        # Guest facts (machine/guest.py) first: they may never shadow our own keys.
        "providerMetadata": {**(guest or {}), "host": host, "domainName": domain_name},
        "pendingChanges": _bounded(pending_changes),
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
    # None: this pass did not resolve the machine, so the last record stands.
    retained = current.get("retainedVolumes") if retained_volumes is None else retained_volumes
    if retained is not None:
        status["retainedVolumes"] = sorted(retained)[:MAX_RETAINED_VOLUMES]
    # Placement's (the placing daemon writes and removes it): never changed here.
    if current.get("preemption") is not None:
        status["preemption"] = current["preemption"]
    # A LibvirtRestore's (it writes and removes it); this pass only says the machine is held off.
    hold = current.get("restore")
    if isinstance(hold, Mapping):
        status["restore"] = {**hold, "held": True} if restore_held else dict(hold)
    # A migration's (its daemons write and remove it): never changed here.
    if current.get("migration") is not None:
        status["migration"] = current["migration"]
    # None: this pass said nothing of the disks' classes (disk_status.py), so the last stands.
    reported = current.get("disks") if disks is None else [dict(d) for d in disks]
    if reported:
        status["disks"] = reported[:MAX_DISKS]
    return status


# The CRD's bounds on status.pendingChanges: a longer list would make every status patch fail.
MAX_PENDING_CHANGES = 64
MAX_PENDING_CHANGE_LENGTH = 1024
# The CRD's bound on status.retainedVolumes (a machine has far fewer disks).
MAX_RETAINED_VOLUMES = 64
# The CRD's bound on status.disks.
MAX_DISKS = 64


def _bounded(changes: Sequence[str]) -> list[str]:
    items = [change[:MAX_PENDING_CHANGE_LENGTH] for change in changes]
    if len(items) <= MAX_PENDING_CHANGES:
        return items
    kept = MAX_PENDING_CHANGES - 1
    return [*items[:kept], f"... and {len(items) - kept} more changes"]


def retained_volumes(plan: ResolvedMachine) -> set[tuple[str, str]]:
    """(pool, volume) of the machine's disks that say deleteOnTermination: false."""
    return {(v.pool, v.volume) for v in plan.volumes if not v.delete_on_termination}


def retained_record(plan: ResolvedMachine) -> list[str]:
    """`status.retainedVolumes` for `plan`: `pool/volume`, sorted."""
    return sorted(f"{pool}/{volume}" for pool, volume in retained_volumes(plan))


def recorded_retained(status: Mapping[str, Any] | None) -> set[tuple[str, str]] | None:
    """The retained volumes a pass recorded; None when no pass has recorded them yet."""
    recorded = (status or {}).get("retainedVolumes")
    if not isinstance(recorded, list):
        return None
    pairs = (str(item).partition("/") for item in recorded)
    return {(pool, volume) for pool, sep, volume in pairs if sep and pool and volume}
