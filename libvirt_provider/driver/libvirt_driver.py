"""The libvirt adapter: the only code that calls libvirt-python (with the error translation).

`LibvirtHypervisor` is the whole `Hypervisor` over one connection URI, assembled from one class
per role: the connection and its event loop (`libvirt_connection`), domains (`libvirt_domains`)
and volumes (`libvirt_volumes`). Host facts are read here.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import libvirt
from lxml import etree

from libvirt_provider.driver.base import Hypervisor
from libvirt_provider.driver.libvirt_connection import stop_event_loop
from libvirt_provider.driver.libvirt_domains import LibvirtDomains
from libvirt_provider.driver.libvirt_volumes import LibvirtVolumes
from libvirt_provider.driver.types import HostFacts

__all__ = ["LibvirtHypervisor", "stop_event_loop"]


class LibvirtHypervisor(LibvirtDomains, LibvirtVolumes):
    """`Hypervisor` over one libvirt connection URI."""

    def host_facts(self) -> HostFacts:
        def facts(conn: libvirt.virConnect) -> HostFacts:
            caps = etree.fromstring(conn.getCapabilities().encode())
            arch = caps.findtext("host/cpu/arch") or "x86_64"
            types: set[str] = set()
            for guest in caps.iterfind("guest"):
                guest_arch = guest.find("arch")
                if (
                    guest.findtext("os_type") == "hvm"
                    and guest_arch is not None
                    and guest_arch.get("name") == arch
                ):
                    types.update(str(d.get("type")) for d in guest_arch.iterfind("domain"))
            return HostFacts(
                hostname=conn.getHostname() or socket.gethostname(),
                arch=arch,
                domain_types=frozenset(types),
                pools=frozenset(p.name() for p in conn.listAllStoragePools()),
                networks=frozenset(n.name() for n in conn.listAllNetworks()),
            )

        return self._call(facts)


if TYPE_CHECKING:

    def _satisfies_protocol(adapter: LibvirtHypervisor) -> Hypervisor:
        return adapter
