"""Network calls of the libvirt adapter: a libvirt network's DHCP, and host reservations in it.

A public address on a network libvirt's dnsmasq serves reaches the guest as a DHCP host
reservation (`<host mac ip>`), added to the running network and to its persistent definition in
one `virNetworkUpdate` (libvirt rewrites dnsmasq's hosts file and signals it; no restart, no other
guest disturbed). The reservation for an address is the claim's to decide: one another MAC holds
(left behind by a machine removed without its daemon) is replaced, never refused.

dnsmasq never hands a reserved address to its MAC while another MAC's lease on it lasts (the
previous holder's guest, destroyed without releasing it): it gives a dynamic one instead. So a
reservation's lease is short (`<lease expiry>`, libvirt >= 6.3; dnsmasq's minimum, 2 minutes; a
running guest renews it every minute), and the leases are read with the DHCP, so a machine can
wait for a stale one to run out before its guest first asks.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging

import libvirt
from lxml import etree

from libvirt_provider.constants import RESERVATION_LEASE_MINUTES
from libvirt_provider.driver.libvirt_connection import LibvirtConnection
from libvirt_provider.driver.libvirt_errors import is_missing, is_unsupported_call
from libvirt_provider.driver.types import NetworkDhcp

__all__ = ["LibvirtNetworks", "parse_network_dhcp"]

log = logging.getLogger(__name__)


def parse_network_dhcp(name: str, xml: str) -> NetworkDhcp | None:
    """The DHCP of a network's XML; None when none of its `<ip>` elements serves DHCP."""
    root = etree.fromstring(xml.encode())
    ranges: list[tuple[str, str]] = []
    subnets: list[str] = []
    hosts: dict[str, str] = {}
    served = False
    for ip in root.iterfind("ip"):
        dhcp = ip.find("dhcp")
        if dhcp is None:
            continue
        served = True
        address = ip.get("address")
        prefix = ip.get("prefix") or ip.get("netmask")
        if address and prefix:
            subnets.append(str(ipaddress.ip_network(f"{address}/{prefix}", strict=False)))
        for rng in dhcp.iterfind("range"):
            start, end = rng.get("start"), rng.get("end")
            if start and end:
                ranges.append((start, end))
        for host in dhcp.iterfind("host"):
            mac, addr = host.get("mac"), host.get("ip")
            if mac and addr:
                hosts[mac.lower()] = addr
    if not served:
        return None
    return NetworkDhcp(network=name, ranges=tuple(ranges), subnets=tuple(subnets), hosts=hosts)


def _host_xml(mac: str, address: str, *, lease: bool = True) -> str:
    if not lease:
        return f"<host mac='{mac}' ip='{address}'/>"
    return (
        f"<host mac='{mac}' ip='{address}'>"
        f"<lease expiry='{RESERVATION_LEASE_MINUTES}' unit='minutes'/></host>"
    )


class LibvirtNetworks(LibvirtConnection):
    def network_dhcp(self, network: str) -> NetworkDhcp | None:
        """The network's DHCP; None when it serves none or does not exist on this host."""

        def read(conn: libvirt.virConnect) -> NetworkDhcp | None:
            try:
                net = conn.networkLookupByName(network)
            except libvirt.libvirtError as err:
                if is_missing(err):
                    return None
                raise
            dhcp = parse_network_dhcp(network, net.XMLDesc(0))
            if dhcp is None or not net.isActive():
                return dhcp
            try:
                found = net.DHCPLeases()
            except libvirt.libvirtError as err:
                # libvirt's test driver keeps no leases; every real one does.
                if is_unsupported_call(err):
                    return dhcp
                raise
            leases = {
                str(ipaddress.ip_address(lease["ipaddr"])): (
                    str(lease["mac"]).lower(),
                    int(lease["expirytime"]),
                )
                for lease in found
                if lease.get("ipaddr") and lease.get("mac")
            }
            return dataclasses.replace(dhcp, leases=leases)

        return self._call(read)

    def reserve_address(self, network: str, *, mac: str, address: str) -> None:
        """`address` for `mac` in the network's DHCP, live and persistent; an entry that gives
        the address to another MAC, or the MAC another address, is removed first."""
        mac = mac.lower()
        canonical = str(ipaddress.ip_address(address))

        def reserve(conn: libvirt.virConnect) -> None:
            net = conn.networkLookupByName(network)
            current = parse_network_dhcp(network, net.XMLDesc(0))
            hosts = dict(current.hosts) if current is not None else {}
            if hosts.get(mac) == canonical:
                return
            for held_mac, held in hosts.items():
                if held_mac == mac or held == canonical:
                    log.info(
                        "network %s: replacing DHCP reservation %s for %s", network, held, held_mac
                    )
                    _update(net, libvirt.VIR_NETWORK_UPDATE_COMMAND_DELETE, held_mac, held)
            _update(net, libvirt.VIR_NETWORK_UPDATE_COMMAND_ADD_LAST, mac, canonical)

        self._call(reserve)

    def release_reservation(self, network: str, *, mac: str, address: str) -> None:
        """Remove the reservation of `address` for `mac`; nothing when there is none (or the
        network is gone)."""
        mac = mac.lower()
        canonical = str(ipaddress.ip_address(address))

        def release(conn: libvirt.virConnect) -> None:
            try:
                net = conn.networkLookupByName(network)
            except libvirt.libvirtError as err:
                if is_missing(err):
                    return
                raise
            current = parse_network_dhcp(network, net.XMLDesc(0))
            if current is None or current.hosts.get(mac) != canonical:
                return
            _update(net, libvirt.VIR_NETWORK_UPDATE_COMMAND_DELETE, mac, canonical)

        self._call(release)


def _update(net: libvirt.virNetwork, command: int, mac: str, address: str) -> None:
    flags = libvirt.VIR_NETWORK_UPDATE_AFFECT_CONFIG
    if net.isActive():
        flags |= libvirt.VIR_NETWORK_UPDATE_AFFECT_LIVE
    # parentIndex -1: the network's first <ip> of the address's family.
    net.update(
        command, libvirt.VIR_NETWORK_SECTION_IP_DHCP_HOST, -1, _host_xml(mac, address), flags
    )
