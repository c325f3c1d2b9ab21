"""The lab's extra libvirt hosts are separate machines as far as libvirt and the network can tell.

Placement tests rely on this: each host answers only on its own socket, carries the main lab's
network and pool names so one set of catalog objects resolves everywhere, differs in shape where
the lab says so (h1's extra network, h2's extra pool), and keeps its bridges and guests inside its
own network namespace.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest
from lxml import etree

from tests.support.lab_access import LabHost, LabInfo
from tests.support.virt import dhcp_lease, guest_domain_xml, overlay_volume_xml
from tests.support.waiting import eventually

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@pytest.fixture
def hosts(lab: LabInfo) -> list[LabHost]:
    assert len(lab.hosts) >= 3, "these checks need the lab's three extra hosts (the default)"
    return lab.hosts


@contextlib.contextmanager
def _connect(uri: str) -> Iterator[libvirt.virConnect]:
    conn = libvirt.open(uri)
    try:
        yield conn
    finally:
        conn.close()


def _links(netns: str | None) -> dict[str, str]:
    """Interface name to MAC address in `netns` (None: the host's own namespace)."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    out = subprocess.run(
        [*prefix, "ip", "-o", "link", "show"], capture_output=True, text=True, check=True
    ).stdout
    links: dict[str, str] = {}
    for line in out.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        mac = re.search(r"link/\S+ ([0-9a-f:]{17})", line)
        links[name] = mac.group(1) if mac else ""
    return links


def _network_xml(conn: libvirt.virConnect, name: str) -> etree._Element:
    net = conn.networkLookupByName(name)
    assert net.isActive()
    return etree.fromstring(net.XMLDesc(0))


def _subnets(conn: libvirt.virConnect) -> dict[str, str]:
    """Network name to its bridge's address, for every network of a libvirtd."""
    return {
        net.name(): str(etree.fromstring(net.XMLDesc(0)).find("ip").get("address"))  # type: ignore[union-attr]
        for net in conn.listAllNetworks()
    }


def test_every_host_answers_on_its_own_socket(lab: LabInfo, hosts: list[LabHost]) -> None:
    with _connect(lab.libvirt_uri) as main:
        main_hostname = main.getHostname()
    assert len({h.uri for h in hosts} | {lab.libvirt_uri}) == len(hosts) + 1
    for host in hosts:
        assert host.name == f"{lab.netns}-h{host.index}" == host.netns
        assert DNS_SUBDOMAIN.match(host.name), host.name
        assert len(host.name) <= 63, host.name
        socket = Path(host.uri.split("socket=", 1)[1])
        assert socket.is_socket()
        assert socket.is_relative_to(lab.dir)
        # The daemon behind the socket runs in the host's own namespace.
        pids = subprocess.run(
            ["ip", "netns", "pids", host.netns], capture_output=True, text=True, check=True
        ).stdout.split()
        assert "libvirtd" in {Path(f"/proc/{p}/comm").read_text().strip() for p in pids}
        with _connect(host.uri) as conn:
            # Each host has a UTS namespace named after it: the socket leads to that daemon.
            assert conn.getHostname() == host.name != main_hostname
            caps = etree.fromstring(
                conn.getDomainCapabilities(None, "x86_64", None, lab.domain_type, 0)
            )
            assert caps.findtext("domain") == lab.domain_type
            assert caps.find("os").get("supported") == "yes"  # type: ignore[union-attr]


def test_hosts_share_names_and_differ_in_shape(lab: LabInfo, hosts: list[LabHost]) -> None:
    with _connect(lab.libvirt_uri) as main:
        base_capacity = (
            main.storagePoolLookupByName(lab.pool)
            .storageVolLookupByName(lab.guest_volume)
            .info()[1]
        )
        addresses = list(_subnets(main).values())
        assert lab.only_network not in _subnets(main)
        assert lab.extra_pool not in main.listStoragePools()
    for host in hosts:
        with _connect(host.uri) as conn:
            net = _network_xml(conn, lab.network)
            assert net.find("forward") is None, f"{host.name}: {lab.network} must be isolated"
            assert net.find("ip/dhcp") is not None
            pool = conn.storagePoolLookupByName(lab.pool)
            assert pool.isActive()
            assert pool.listVolumes() == [lab.guest_volume]
            assert pool.storageVolLookupByName(lab.guest_volume).info()[1] == base_capacity
            networks = _subnets(conn)
            addresses += networks.values()
            assert (lab.only_network in networks) == (host.index == 1), host.name
            if host.index == 1:
                only = _network_xml(conn, lab.only_network)
                assert only.find("forward") is None
                assert only.find("ip/dhcp") is not None
            pools = conn.listStoragePools() + conn.listDefinedStoragePools()
            assert (lab.extra_pool in pools) == (host.index == 2), host.name
            if host.index == 2:
                assert conn.storagePoolLookupByName(lab.extra_pool).isActive()
    # Distinct subnets everywhere, so a lease in a log names its host.
    assert len(set(addresses)) == len(addresses), addresses


def test_a_hosts_bridges_exist_only_in_its_namespace(lab: LabInfo, hosts: list[LabHost]) -> None:
    bridges: dict[str, set[str]] = {}
    for host in hosts:
        with _connect(host.uri) as conn:
            bridges[host.netns] = {
                str(etree.fromstring(n.XMLDesc(0)).find("bridge").get("name"))  # type: ignore[union-attr]
                for n in conn.listAllNetworks()
            }
    namespaces: list[str | None] = [None, lab.netns, *bridges]
    seen = {ns: set(_links(ns)) for ns in namespaces}
    for netns, own in bridges.items():
        assert own <= seen[netns], f"{netns} lacks its bridges {own - seen[netns]}"
        for other in namespaces:
            if other != netns:
                assert not own & seen[other], f"{netns}'s bridges {own & seen[other]} in {other}"


def test_guest_boots_on_a_host_and_its_link_stays_there(lab: LabInfo, hosts: list[LabHost]) -> None:
    host = hosts[-1]
    name = "hostsmoke-" + uuid.uuid4().hex[:8]
    with _connect(host.uri) as conn:
        pool = conn.storagePoolLookupByName(lab.pool)
        base = pool.storageVolLookupByName(lab.guest_volume)
        vol = pool.createXML(overlay_volume_xml(f"{name}.qcow2", base.path()), 0)
        bridge_ip = _subnets(conn)[lab.network]
        dom = conn.defineXML(
            guest_domain_xml(lab, name=name, dom_uuid=str(uuid.uuid4()), disk=vol.path())
        )
        try:
            dom.create()
            address = eventually(
                lambda: dhcp_lease(dom), timeout=180, interval=0.5, what="a DHCP lease on the host"
            )
            assert address.rsplit(".", 1)[0] == bridge_ip.rsplit(".", 1)[0], (address, bridge_ip)
            tap = etree.fromstring(dom.XMLDesc(0)).find("devices/interface/target")
            assert tap is not None
            tap_name = str(tap.get("dev"))
            tap_mac = _links(host.netns).get(tap_name)
            assert tap_mac, f"{tap_name} not in {host.netns}"
            for other in [None, lab.netns, *(h.netns for h in hosts if h != host)]:
                assert tap_mac not in _links(other).values(), f"{tap_name} seen in {other}"
        finally:
            if dom.isActive():
                dom.destroy()
            dom.undefine()
            vol.delete(0)
