"""Network calls of the libvirt adapter: a libvirt network's DHCP, and host reservations in it.

A public address on a network libvirt's dnsmasq serves reaches the guest as a DHCP host
reservation (`<host mac ip>`), added to the running network and to its persistent definition in
one `virNetworkUpdate` (libvirt rewrites dnsmasq's hosts file and signals it; no restart, no other
guest disturbed). The reservation for an address is the claim's to decide: one another MAC holds
(left behind by a machine removed without its daemon) is replaced, never refused.
"""

from __future__ import annotations

import ipaddress
import logging

import libvirt
from lxml import etree

from libvirt_provider.driver.libvirt_connection import LibvirtConnection
from libvirt_provider.driver.libvirt_errors import is_missing
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


def _host_xml(mac: str, address: str) -> str:
    return f"<host mac='{mac}' ip='{address}'/>"


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
            return parse_network_dhcp(network, net.XMLDesc(0))

        return self._call(read)

    def reserve_address(self, network: str, *, mac: str, address: str) -> None:
        """`address` for `mac` in the network's DHCP, live and persistent; an entry that gives
        the address to another MAC, or the MAC another address, is removed first."""
        mac = mac.lower()
        canonical = str(ipaddress.ip_address(address))

        def reserve(conn: libvirt.virConnect) -> None:
            net = conn.networkLookupByName(network)
            current = parse_network_dhcp(network, net.XMLDesc(libvirt.VIR_NETWORK_XML_INACTIVE))
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
            current = parse_network_dhcp(network, net.XMLDesc(libvirt.VIR_NETWORK_XML_INACTIVE))
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
