"""The public addresses a machine holds: claims in the API server, and reservations on its host.

A claim is a `networking.k8s.io/v1` IPAddress named after the address. The API server creates a
name once, so of two daemons (or two workers) that try the same address exactly one succeeds,
and the other tries the next free one; no lock, no leader. The claim's `parentRef` names the
LibvirtMachine and its labels its uid and interface, so a machine finds what it holds after a
restart of its daemon, at any step. A claim is made only for a machine that carries the
provider's finalizer, and released by the machine's deletion (`reconciler._delete`) before the
finalizer goes: no address outlives its machine. A claim whose machine is gone all the same (its
finalizer removed by hand) is swept when its pool runs out. The address is chosen by
`resolve.addresses`; this module only reads, creates and deletes.

The address reaches the guest through a DHCP host reservation on the host's libvirt network when
its plan says so (`reservation`), made before the domain first starts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from libvirt_provider import constants as c
from libvirt_provider.driver.base import NetworkReservations
from libvirt_provider.errors import StateConflictError
from libvirt_provider.faults import crash_point
from libvirt_provider.machine.store import MachineStore, Obj
from libvirt_provider.resolve.addresses import choose_address, in_pool
from libvirt_provider.resolved import PublicAddress, ResolvedMachine

__all__ = ["AddressClaims", "Claim", "Exhausted", "Reservations", "claim_of", "held_addresses"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claim:
    """A claim as the API server holds it."""

    address: str
    uid: str
    machine_uid: str
    interface: str
    network: str
    mac: str
    reservation: str
    """The libvirt network whose DHCP reserves the address on the machine's host; empty: none."""
    parent: tuple[str, str]
    """The LibvirtMachine's namespace and name."""


def claim_of(obj: Obj) -> Claim:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    notes = meta.get("annotations") or {}
    parent = (obj.get("spec") or {}).get("parentRef") or {}
    return Claim(
        address=str(meta.get("name")),
        uid=str(meta.get("uid") or ""),
        machine_uid=str(labels.get(c.CLAIM_MACHINE_UID_LABEL) or ""),
        interface=str(labels.get(c.CLAIM_INTERFACE_LABEL) or ""),
        network=str(notes.get(c.CLAIM_NETWORK_ANNOTATION) or ""),
        mac=str(notes.get(c.CLAIM_MAC_ANNOTATION) or ""),
        reservation=str(notes.get(c.CLAIM_LIBVIRT_NETWORK_ANNOTATION) or ""),
        parent=(str(parent.get("namespace") or ""), str(parent.get("name") or "")),
    )


@dataclass(frozen=True)
class Exhausted:
    """No address of a pool was free for the machine."""

    interface: str
    network: str
    size: int

    def message(self) -> str:
        return (
            f"interface {self.interface}: all {self.size} addresses of the addressPool of "
            f"LibvirtNetwork {self.network!r} are held by other machines; the machine waits "
            f"for one to be released (looked at again every {c.ADDRESS_POOL_POLL_SECONDS:g} s)"
        )


class AddressClaims:
    """The machine's claims: which it holds, making the missing ones, releasing them all."""

    def __init__(self, *, store: MachineStore, host: str) -> None:
        self._store = store
        self._host = host

    def held(self, machine_uid: str) -> list[Claim]:
        return [claim_of(o) for o in self._store.address_claims(machine_uid=machine_uid)]

    def claim(self, obj: Obj, plan: ResolvedMachine) -> Exhausted | None:
        """Claim an address for each public NIC of the plan that has none; the first pool found
        exhausted, or None when every NIC holds one now. A StateConflictError means the pass
        should look again (others claimed every address it tried)."""
        meta = obj.get("metadata") or {}
        for wanted in plan.public_addresses:
            if wanted.address is not None:
                continue
            taken = {claim_of(o).address for o in self._store.address_claims()}
            claimed = self._claim_one(obj, wanted, taken) or (
                self._sweep(wanted, taken) and self._claim_one(obj, wanted, taken)
            )
            if not claimed:
                return Exhausted(wanted.interface, wanted.network, wanted.pool.size())
            log.info(
                "%s/%s: interface %s claimed a public address",
                meta.get("namespace"),
                meta.get("name"),
                wanted.interface,
            )
        return None

    def _claim_one(self, obj: Obj, wanted: PublicAddress, taken: set[str]) -> bool:
        """Create a claim for the lowest free address; False when none is free. Each address
        another daemon took meanwhile is skipped; after ADDRESS_CLAIM_ATTEMPTS of them the pass
        gives up (StateConflictError) and the next one starts from a fresh list."""
        for _attempt in range(c.ADDRESS_CLAIM_ATTEMPTS):
            address = choose_address(wanted.pool, taken)
            if address is None:
                return False
            try:
                self._store.create_address_claim(self._body(obj, wanted, address))
            except StateConflictError:
                taken.add(address)
                continue
            crash_point("after-address-claim")
            self._store.event(
                obj,
                reason=c.EVENT_ADDRESS_CLAIMED,
                message=f"interface {wanted.interface} holds public address {address} from "
                f"LibvirtNetwork {wanted.network!r}",
            )
            return True
        raise StateConflictError(
            f"interface {wanted.interface}: {c.ADDRESS_CLAIM_ATTEMPTS} free addresses of "
            f"LibvirtNetwork {wanted.network!r} were claimed by others meanwhile"
        )

    def _sweep(self, wanted: PublicAddress, taken: set[str]) -> bool:
        """Release the pool's claims whose machine is gone (its finalizer was removed by hand, or
        a pass raced its deletion); True when one was."""
        swept = False
        for obj in self._store.address_claims():
            claim = claim_of(obj)
            if not in_pool(wanted.pool, claim.address) or not claim.parent[1]:
                continue
            if self._store.machine_uid(*claim.parent) == claim.machine_uid:
                continue
            log.warning(
                "public address %s: its machine %s/%s (uid %s) is gone; releasing its claim",
                claim.address,
                *claim.parent,
                claim.machine_uid,
            )
            self._store.delete_address_claim(claim.address, uid=claim.uid)
            taken.discard(claim.address)
            swept = True
        return swept

    def release(self, obj: Obj, claims: Iterable[Claim]) -> None:
        for claim in claims:
            self._store.delete_address_claim(claim.address, uid=claim.uid)
            self._store.event(
                obj,
                reason=c.EVENT_ADDRESS_RELEASED,
                message=f"public address {claim.address} of interface {claim.interface} released",
            )

    def _body(self, obj: Obj, wanted: PublicAddress, address: str) -> Obj:
        meta = obj.get("metadata") or {}
        return {
            "apiVersion": f"{c.IPADDRESS_GROUP}/{c.IPADDRESS_VERSION}",
            "kind": c.IPADDRESS_KIND,
            "metadata": {
                "name": address,
                "labels": {
                    c.ADDRESS_MANAGED_BY_LABEL: c.ADDRESS_MANAGER,
                    c.CLAIM_MACHINE_UID_LABEL: str(meta.get("uid")),
                    c.CLAIM_INTERFACE_LABEL: wanted.interface,
                    c.HOST_LABEL: self._host,
                },
                "annotations": {
                    c.CLAIM_NETWORK_ANNOTATION: wanted.network,
                    c.CLAIM_MAC_ANNOTATION: wanted.mac,
                    c.CLAIM_LIBVIRT_NETWORK_ANNOTATION: wanted.reservation or "",
                },
            },
            "spec": {
                "parentRef": {
                    "group": c.GROUP,
                    "resource": c.MACHINE_PLURAL,
                    "namespace": str(meta.get("namespace")),
                    "name": str(meta.get("name")),
                }
            },
        }


def held_addresses(claims: Sequence[Claim]) -> dict[str, str]:
    """Interface -> address, for the resolver."""
    return {claim.interface: claim.address for claim in claims}


class Reservations:
    """DHCP host reservations for the public addresses of this host's machines. Each is made
    once per daemon (then remembered), and again when the plan changes."""

    def __init__(self, hypervisor: NetworkReservations) -> None:
        self._hv = hypervisor
        self._made: set[tuple[str, str, str]] = set()

    def ensure(self, plan: ResolvedMachine) -> None:
        for public in plan.public_addresses:
            if public.reservation is None or public.address is None:
                continue
            key = (public.reservation, public.mac, public.address)
            if key in self._made:
                continue
            self._hv.reserve_address(public.reservation, mac=public.mac, address=public.address)
            self._made.add(key)

    def stale_lease(self, plan: ResolvedMachine, now: float) -> tuple[str, float] | None:
        """Why the machine's guest would not get its address yet, and for how many seconds:
        the host's DHCP server still leases it to another MAC (a previous holder's guest, gone
        without releasing it), and would hand the guest a dynamic address instead."""
        for public in plan.public_addresses:
            if public.reservation is None or public.address is None:
                continue
            dhcp = self._hv.network_dhcp(public.reservation)
            held = dhcp.leases.get(public.address) if dhcp is not None else None
            if held is None or held[0] == public.mac.lower():
                continue
            left = max(held[1] - now, 1.0)
            return (
                f"interface {public.interface}: {public.address} is still leased by the DHCP "
                f"server of libvirt network {public.reservation!r} to {held[0]} (a previous "
                f"holder) for {left:.0f} s; the machine is created once that lease has ended"
            ), left
        return None

    def release(self, claims: Iterable[Claim]) -> None:
        for claim in claims:
            if not claim.reservation or not claim.mac:
                continue
            self._hv.release_reservation(claim.reservation, mac=claim.mac, address=claim.address)
            self._made.discard((claim.reservation, claim.mac, claim.address))
