"""The libvirt adapter: the only code that calls libvirt-python (with the error translation).

`LibvirtHypervisor` is the whole `Hypervisor` over one connection URI, assembled from one class
per role: the connection and its event loop (`libvirt_connection`), domains (`libvirt_domains`)
and volumes (`libvirt_volumes`). Host facts are read here.
"""

from __future__ import annotations

import contextlib
import socket
from typing import TYPE_CHECKING

import libvirt
from lxml import etree

from libvirt_provider.driver.base import Hypervisor, MigrationHypervisor, SnapshotHypervisor
from libvirt_provider.driver.libvirt_connection import stop_event_loop
from libvirt_provider.driver.libvirt_console import LibvirtConsoles
from libvirt_provider.driver.libvirt_graphics import LibvirtGraphics
from libvirt_provider.driver.libvirt_migrations import LibvirtMigrations
from libvirt_provider.driver.libvirt_networks import LibvirtNetworks
from libvirt_provider.driver.libvirt_snapshots import LibvirtSnapshots
from libvirt_provider.driver.types import HostFacts, HostInventory, PoolInfo

__all__ = ["LibvirtHypervisor", "stop_event_loop"]


class LibvirtHypervisor(
    LibvirtSnapshots, LibvirtNetworks, LibvirtConsoles, LibvirtGraphics, LibvirtMigrations
):
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

    def host_inventory(self) -> HostInventory:
        """Sizes, offers and versions of the host, for its LibvirtHost (one connection's view)."""

        def inventory(conn: libvirt.virConnect) -> HostInventory:
            caps = etree.fromstring(conn.getCapabilities().encode())
            arch = caps.findtext("host/cpu/arch") or "x86_64"
            types: set[str] = set()
            machines: set[str] = set()
            for guest in caps.iterfind("guest"):
                guest_arch = guest.find("arch")
                if guest.findtext("os_type") != "hvm" or guest_arch is None:
                    continue
                if guest_arch.get("name") != arch:
                    continue
                types.update(str(d.get("type")) for d in guest_arch.iterfind("domain"))
                for machine in guest_arch.iter("machine"):
                    machines.add(machine.text or "")
                    if machine.get("canonical"):
                        machines.add(str(machine.get("canonical")))
            info = conn.getInfo()
            pools = []
            for pool in conn.listAllStoragePools():
                if not pool.isActive():
                    continue
                _refresh(pool)
                _state, capacity, _allocation, available = pool.info()
                pools.append(PoolInfo(pool.name(), int(capacity), int(available)))
            networks = frozenset(n.name() for n in conn.listAllNetworks() if n.isActive())
            return HostInventory(
                cpus=int(info[2]),
                memory=int(info[1]) * 2**20,
                pools=tuple(sorted(pools, key=lambda p: p.name)),
                networks=networks,
                domain_types=frozenset(types),
                machine_types=frozenset(m for m in machines if m),
                uefi=_uefi(conn, arch, types),
                libvirt_version=_version(conn.getLibVersion()),
                hypervisor_version=_version(conn.getVersion()),
            )

        return self._call(inventory)


def _refresh(pool: libvirt.virStoragePool) -> None:
    """Rescan a pool, so that its sizes are today's: libvirt keeps a pool's capacity and free
    space from its last refresh, and a file that grew behind libvirt's back (a guest's thin disk,
    anything written into a directory pool) would otherwise never show. A pool busy with a job (a
    volume being built) refuses; its last figures then stand until the next heartbeat."""
    with contextlib.suppress(libvirt.libvirtError):
        pool.refresh(0)


def _version(number: int) -> str:
    """libvirt's packed version number (major * 1,000,000 + minor * 1,000 + micro) as text."""
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


def _uefi(conn: libvirt.virConnect, arch: str, types: set[str]) -> bool:
    """Whether the domain capabilities list an EFI firmware (a driver without them has none)."""
    for virt_type in sorted(types & {"kvm", "qemu"}):
        try:
            xml = conn.getDomainCapabilities(None, arch, None, virt_type, 0)
        except libvirt.libvirtError:
            continue
        caps = etree.fromstring(xml.encode())
        firmware = [str(v.text) for v in caps.iterfind("os/enum[@name='firmware']/value")]
        loaders = [str(v.text) for v in caps.iterfind("os/loader/value")]
        if "efi" in firmware or any("OVMF" in loader for loader in loaders):
            return True
    return False


if TYPE_CHECKING:

    def _satisfies_protocol(adapter: LibvirtHypervisor) -> Hypervisor:
        return adapter

    def _satisfies_snapshot_protocol(adapter: LibvirtHypervisor) -> SnapshotHypervisor:
        return adapter

    def _satisfies_migration_protocol(adapter: LibvirtHypervisor) -> MigrationHypervisor:
        return adapter
