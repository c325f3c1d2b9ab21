"""Public addresses from a LibvirtNetwork's pool: which interfaces want one, which address is free,
and which pools are unusable (pure).

An address is handed to one machine at a time by an atomic claim in the API server (an IPAddress
named after it, `machine/addresses.py`); this module only chooses. It picks the lowest free address
in the pool's order, so two daemons racing for the last one try the same name and exactly one
create succeeds. A pool is refused (`AddressPoolConflict`) when it shares addresses with another
network's pool (two claims could never tell them apart) or, where libvirt's DHCP serves the
network, with its dynamic range (dnsmasq would lease the same address to any guest) or lies
outside the network's subnet (dnsmasq serves reservations only inside it).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet

from catalog.network import AddressPool, LibvirtNetwork
from libvirt_provider.driver.types import NetworkDhcp

__all__ = [
    "choose_address",
    "dhcp_conflict",
    "in_pool",
    "pool_addresses",
    "pool_overlaps",
]


def pool_addresses(pool: AddressPool) -> Iterator[str]:
    """Every address of the pool, ranges in ascending order, each from start to end."""
    for rng in sorted(pool.ranges, key=lambda r: r.span()[0]):
        first, last = rng.span()
        for value in range(first, last + 1):
            yield str(ipaddress.ip_address(value))


def in_pool(pool: AddressPool, address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(
        ip.version == r.version and r.span()[0] <= int(ip) <= r.span()[1] for r in pool.ranges
    )


def choose_address(pool: AddressPool, taken: AbstractSet[str]) -> str | None:
    """The lowest address of the pool not in `taken` (canonical spellings); None: all taken."""
    for address in pool_addresses(pool):
        if address not in taken:
            return address
    return None


def _overlap(a: AddressPool, b: AddressPool) -> tuple[str, str] | None:
    for left in a.ranges:
        for right in b.ranges:
            if left.version != right.version:
                continue
            (l1, l2), (r1, r2) = left.span(), right.span()
            if l1 <= r2 and r1 <= l2:
                return f"{left.start}-{left.end}", f"{right.start}-{right.end}"
    return None


def pool_overlaps(name: str, networks: Mapping[str, LibvirtNetwork]) -> list[str]:
    """Why the pool of LibvirtNetwork `name` shares addresses with another network's pool."""
    own = networks[name].spec.address_pool
    if own is None:
        return []
    found = []
    for other_name, other in sorted(networks.items()):
        pool = other.spec.address_pool
        if other_name == name or pool is None:
            continue
        overlap = _overlap(own, pool)
        if overlap is not None:
            found.append(
                f"its range {overlap[0]} overlaps range {overlap[1]} of the addressPool of "
                f"LibvirtNetwork {other_name!r}"
            )
    return found


def dhcp_conflict(pool: AddressPool, dhcp: NetworkDhcp) -> str | None:
    """Why the pool cannot be served by reservations on a network whose DHCP is `dhcp`."""
    for start, end in dhcp.ranges:
        low, high = int(ipaddress.ip_address(start)), int(ipaddress.ip_address(end))
        for rng in pool.ranges:
            first, last = rng.span()
            if rng.version == ipaddress.ip_address(start).version and first <= high and low <= last:
                return (
                    f"its range {rng.start}-{rng.end} overlaps the DHCP range {start}-{end} of "
                    f"libvirt network {dhcp.network!r} (its DHCP server could lease a pool "
                    "address to any guest)"
                )
    subnets = [ipaddress.ip_network(s, strict=False) for s in dhcp.subnets]
    for rng in pool.ranges:
        ends = [ipaddress.ip_address(rng.start), ipaddress.ip_address(rng.end)]
        same_family = [n for n in subnets if n.version == rng.version]
        if same_family and not any(all(ip in n for ip in ends) for n in same_family):
            return (
                f"its range {rng.start}-{rng.end} lies outside the subnets "
                f"{', '.join(str(n) for n in same_family)} of libvirt network {dhcp.network!r} "
                "(its DHCP server reserves addresses only inside them)"
            )
    return None
