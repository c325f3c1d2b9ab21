"""An in-memory `Hypervisor` for unit tests of controller logic.

It keeps just enough libvirt behaviour to make controller tests meaningful: UUID and name
uniqueness, the define/start/shutdown/destroy/managed-save state transitions (with libvirt's reason
codes), a running domain's live definition beside its persistent one, transient domains (undefined
while running), volumes per pool and lifecycle notifications. Tests script guest behaviour (whether
it honours the power button, when it gets a lease, a pause) and inject failures per operation. It
reads no domain XML beyond name, UUID, disks and what the live changes edit.

`tests/unit/driver/test_hypervisor_contract.py` runs one suite against this double and against the
real adapter on libvirt's test driver, so the two cannot drift apart unnoticed. Where libvirt's test
driver answers differently from qemu (the production driver), the double follows qemu; that suite
names each such case.
"""

from __future__ import annotations

import copy
import uuid as uuidlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from lxml import etree

from libvirt_provider.constants import METADATA_NAMESPACE as NAMESPACE
from libvirt_provider.driver.base import Hypervisor
from libvirt_provider.driver.types import (
    AddressSource,
    DomainRef,
    DomainState,
    DomainStatus,
    GuestInfo,
    HostFacts,
    InterfaceAddress,
    LifecycleListener,
    NetworkDhcp,
    OverlaySpec,
    VolumeInfo,
)
from libvirt_provider.errors import (
    AgentUnresponsiveError,
    ForeignDomainError,
    NotFoundError,
    PermanentError,
    ProviderError,
    StateConflictError,
)

__all__ = [
    "PAUSED_USER",
    "RUNNING_BOOTED",
    "RUNNING_RESTORED",
    "RUNNING_UNPAUSED",
    "SHUTOFF_DESTROYED",
    "SHUTOFF_SAVED",
    "SHUTOFF_SHUTDOWN",
    "SHUTOFF_UNKNOWN",
    "FakeDomain",
    "FakeHypervisor",
]

# libvirt's reason codes for the states (`DomainStatus.reason`), named as in libvirt-domain.h
# (VIR_DOMAIN_SHUTOFF_DESTROYED, ...); the double does not import libvirt.
SHUTOFF_UNKNOWN = 0
SHUTOFF_SHUTDOWN = 1
SHUTOFF_DESTROYED = 2
SHUTOFF_SAVED = 5
RUNNING_BOOTED = 1
RUNNING_UNPAUSED = 5
RUNNING_RESTORED = 3
PAUSED_USER = 1


@dataclass
class FakeDomain:
    uuid: str
    name: str
    xml: str
    state: DomainState = DomainState.SHUTOFF
    reason: int = SHUTOFF_UNKNOWN
    # The definition the running domain was started with (live changes edit it too); None while
    # shut off. A redefinition changes `xml` only, as libvirt changes only the persistent one.
    live_xml: str | None = None
    # False once undefined while running: libvirt keeps the domain until it stops.
    persistent: bool = True
    has_managed_save: bool = False
    honours_power_button: bool = True
    autostart: bool = False
    addresses: list[InterfaceAddress] = field(default_factory=list)
    # What a guest agent reports while the domain runs; None: no agent channel.
    guest: GuestInfo | None = None
    # A hostile agent: it holds its channel and never answers (each agent call times out).
    agent_silent: bool = False


@dataclass
class FakeHypervisor:
    facts: HostFacts = field(
        default_factory=lambda: HostFacts(
            hostname="fake-host",
            arch="x86_64",
            domain_types=frozenset({"qemu", "kvm"}),
            pools=frozenset({"default"}),
            networks=frozenset({"default"}),
        )
    )
    domains: dict[str, FakeDomain] = field(default_factory=dict)
    volumes: dict[tuple[str, str], VolumeInfo] = field(default_factory=dict)
    # Operation name -> error raised on the next call of it (then cleared).
    failures: dict[str, ProviderError] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    # Domain UUID of each call its guest agent was asked to answer.
    agent_calls: list[str] = field(default_factory=list)
    listeners: list[LifecycleListener] = field(default_factory=list)
    uploads: dict[tuple[str, str], bytes] = field(default_factory=dict)
    resized: dict[tuple[str, str], int] = field(default_factory=dict)
    # Free bytes per pool before the allocation of its volumes is counted (libvirt counts every
    # volume's allocation against its pool); a pool not listed does not account space.
    pool_free: dict[str, int] = field(default_factory=dict)
    # The DHCP of the host's libvirt networks that serve it; reservations edit their hosts.
    dhcp: dict[str, NetworkDhcp] = field(default_factory=dict)

    def _enter(self, op: str) -> None:
        self.calls.append(op)
        error = self.failures.pop(op, None)
        if error is not None:
            raise error

    def _dom(self, uuid: str) -> FakeDomain:
        try:
            return self.domains[uuid]
        except KeyError:
            raise NotFoundError(f"domain {uuid} not found") from None

    def _pool(self, pool: str) -> None:
        """Volume calls name a pool of the host's; libvirt reports any other as not found."""
        if pool not in self.facts.pools:
            raise NotFoundError(f"storage pool {pool!r} not found")

    def _notify(self, uuid: str) -> None:
        for listener in list(self.listeners):
            listener(uuid)

    def _stop(self, dom: FakeDomain, reason: int) -> None:
        """The domain stops; a transient one (undefined while running) is gone with it."""
        dom.state, dom.reason, dom.live_xml = DomainState.SHUTOFF, reason, None
        dom.addresses = []
        if not dom.persistent:
            del self.domains[dom.uuid]
        self._notify(dom.uuid)

    def host_facts(self) -> HostFacts:
        self._enter("host_facts")
        return self.facts

    def network_dhcp(self, network: str) -> NetworkDhcp | None:
        self._enter("network_dhcp")
        return self.dhcp.get(network)

    def reserve_address(self, network: str, *, mac: str, address: str) -> None:
        self._enter("reserve_address")
        current = self.dhcp.get(network)
        if current is None:
            raise NotFoundError(f"network {network!r} serves no DHCP")
        hosts = {m: a for m, a in current.hosts.items() if m != mac.lower() and a != address}
        hosts[mac.lower()] = address
        self.dhcp[network] = replace(current, hosts=hosts)

    def release_reservation(self, network: str, *, mac: str, address: str) -> None:
        self._enter("release_reservation")
        current = self.dhcp.get(network)
        if current is None or current.hosts.get(mac.lower()) != address:
            return
        hosts = {m: a for m, a in current.hosts.items() if m != mac.lower()}
        self.dhcp[network] = replace(current, hosts=hosts)

    def lookup(self, *, uuid: str, name: str) -> DomainRef | None:
        self._enter("lookup")
        if uuid in self.domains:
            dom = self.domains[uuid]
            return DomainRef(uuid=dom.uuid, name=dom.name)
        for dom in self.domains.values():
            if dom.name == name:
                raise ForeignDomainError(name, dom.uuid)
        return None

    def define(self, xml: str) -> DomainRef:
        self._enter("define")
        try:
            root = etree.fromstring(xml.encode())
            given = root.findtext("uuid")
            dom_uuid = str(uuidlib.UUID(given)) if given else str(uuidlib.uuid4())
        except (etree.XMLSyntaxError, ValueError) as err:
            # libvirt refuses what does not parse, or does not validate, as an XML error.
            raise PermanentError(f"invalid domain XML: {err}") from err
        name = root.findtext("name")
        if not name:
            raise PermanentError("invalid domain XML: the domain has no name")
        # libvirt reports both clashes as a failed operation (VIR_ERR_OPERATION_FAILED), which the
        # adapter translates to PermanentError.
        for other in self.domains.values():
            if other.name == name and other.uuid != dom_uuid:
                raise PermanentError(f"domain {name!r} already exists with uuid {other.uuid}")
        existing = self.domains.get(dom_uuid)
        if existing is not None and existing.name != name:
            raise PermanentError(
                f"domain {existing.name!r} is already defined with uuid {existing.uuid}"
            )
        if existing is not None:
            # A running domain keeps its live definition until it is started again.
            existing.xml, existing.persistent = xml, True
        else:
            self.domains[dom_uuid] = FakeDomain(uuid=dom_uuid, name=name, xml=xml)
        self._notify(dom_uuid)
        return DomainRef(uuid=dom_uuid, name=name)

    def start(self, uuid: str) -> None:
        self._enter("start")
        dom = self._dom(uuid)
        if dom.state is not DomainState.SHUTOFF:
            raise StateConflictError("domain is already running")
        dom.state = DomainState.RUNNING
        dom.reason = RUNNING_RESTORED if dom.has_managed_save else RUNNING_BOOTED
        dom.live_xml = dom.xml
        dom.has_managed_save = False
        self._notify(uuid)

    def set_autostart(self, uuid: str, autostart: bool) -> None:
        self._enter("set_autostart")
        self._dom(uuid).autostart = autostart

    def shutdown(self, uuid: str) -> None:
        self._enter("shutdown")
        dom = self._dom(uuid)
        if dom.state is not DomainState.RUNNING:
            raise StateConflictError("domain is not running")
        if dom.honours_power_button:
            self._stop(dom, SHUTOFF_SHUTDOWN)

    def destroy(self, uuid: str) -> None:
        self._enter("destroy")
        dom = self._dom(uuid)
        if dom.state is DomainState.SHUTOFF:
            raise StateConflictError("domain is not running")
        self._stop(dom, SHUTOFF_DESTROYED)

    def managed_save(self, uuid: str) -> None:
        self._enter("managed_save")
        dom = self._dom(uuid)
        if dom.state not in (DomainState.RUNNING, DomainState.PAUSED):
            raise StateConflictError("domain is not running")
        if not dom.persistent:
            raise StateConflictError("cannot do managed save for transient domain")
        dom.has_managed_save = True
        self._stop(dom, SHUTOFF_SAVED)

    def discard_saved_state(self, uuid: str) -> None:
        self._enter("discard_saved_state")
        self._dom(uuid).has_managed_save = False

    def resume(self, uuid: str) -> None:
        self._enter("resume")
        dom = self._dom(uuid)
        if dom.state is not DomainState.PAUSED:
            raise StateConflictError("domain is not paused")
        dom.state, dom.reason = DomainState.RUNNING, RUNNING_UNPAUSED
        self._notify(uuid)

    def undefine(self, uuid: str) -> None:
        self._enter("undefine")
        dom = self._dom(uuid)
        dom.has_managed_save = False
        if dom.state is DomainState.SHUTOFF:
            del self.domains[uuid]
        else:
            # libvirt keeps a running domain, transient, until it stops.
            dom.persistent = False
        self._notify(uuid)

    def status(self, uuid: str) -> DomainStatus:
        self._enter("status")
        dom = self._dom(uuid)
        return DomainStatus(
            state=dom.state, reason=dom.reason, has_managed_save=dom.has_managed_save
        )

    def domain_xml(self, uuid: str, *, inactive: bool = False) -> str:
        self._enter("domain_xml")
        dom = self._dom(uuid)
        # A transient domain has no other definition than the one it runs with.
        live = (not inactive or not dom.persistent) and dom.state is not DomainState.SHUTOFF
        return dom.live_xml if live and dom.live_xml is not None else dom.xml

    def disk_sources(self, uuid: str) -> list[str]:
        self._enter("disk_sources")
        root = etree.fromstring(self._dom(uuid).xml.encode())
        found = []
        for src in root.iterfind("devices/disk/source"):
            path = src.get("file") or src.get("dev")
            pool, volume = src.get("pool"), src.get("volume")
            if path is None and pool and volume:
                # Resolved through the pool, as libvirt does: a missing volume is not found.
                path = self._volume(pool, volume).path
            if path:
                found.append(str(path))
        return found

    def addresses(self, uuid: str, source: AddressSource) -> list[InterfaceAddress]:
        self._enter("addresses")
        dom = self._dom(uuid)
        if dom.state is DomainState.SHUTOFF:
            raise StateConflictError("domain is not running")
        if source is AddressSource.AGENT:
            self.agent_calls.append(uuid)
            if dom.agent_silent:
                raise AgentUnresponsiveError("Guest agent is not responding: timed out")
        return [replace(a, source=source) for a in dom.addresses]

    def guest_info(self, uuid: str) -> GuestInfo | None:
        self._enter("guest_info")
        dom = self._dom(uuid)
        if dom.agent_silent and dom.state is not DomainState.SHUTOFF:
            self.agent_calls.append(uuid)
            raise AgentUnresponsiveError("Guest agent is not responding: timed out")
        if dom.guest is not None and dom.guest.agent == "connected":
            self.agent_calls.append(uuid)
        return dom.guest

    def _volume(self, pool: str, name: str) -> VolumeInfo:
        self._pool(pool)
        vol = self.volumes.get((pool, name))
        if vol is None:
            raise NotFoundError(f"volume {name!r} not found in pool {pool!r}")
        return vol

    def find_volume(self, pool: str, name: str) -> VolumeInfo | None:
        self._enter("find_volume")
        self._pool(pool)
        return self.volumes.get((pool, name))

    def list_volumes(self, pool: str) -> list[VolumeInfo]:
        self._enter("list_volumes")
        self._pool(pool)
        return [v for (p, _), v in self.volumes.items() if p == pool]

    def pool_available(self, pool: str) -> int | None:
        self._enter("pool_available")
        self._pool(pool)
        if pool not in self.pool_free:
            return None
        allocated = sum(v.allocation_bytes for (p, _), v in self.volumes.items() if p == pool)
        return max(0, self.pool_free[pool] - allocated)

    def volume_names(self, pool: str) -> list[str]:
        self._enter("volume_names")
        self._pool(pool)
        return [n for (p, n) in self.volumes if p == pool]

    def add_volume(self, pool: str, name: str, *, capacity_bytes: int = 1 << 30) -> VolumeInfo:
        """Test set-up: a volume that already exists (e.g. a cached base image)."""
        self._pool(pool)
        vol = VolumeInfo(
            pool=pool,
            name=name,
            path=f"/fake/{pool}/{name}",
            capacity_bytes=capacity_bytes,
            allocation_bytes=capacity_bytes,
            format="qcow2",
            backing_path=None,
        )
        self.volumes[(pool, name)] = vol
        return vol

    def _new_volume(
        self, pool: str, name: str, capacity: int, fmt: str, backing_path: str | None = None
    ) -> VolumeInfo:
        self._pool(pool)
        if (pool, name) in self.volumes:
            raise StateConflictError(f"volume {name!r} already exists in pool {pool!r}")
        vol = VolumeInfo(
            pool=pool,
            name=name,
            path=f"/fake/{pool}/{name}",
            capacity_bytes=capacity,
            allocation_bytes=0,
            format=fmt,
            backing_path=backing_path,
        )
        self.volumes[(pool, name)] = vol
        return vol

    def create_overlay(self, spec: OverlaySpec) -> VolumeInfo:
        self._enter("create_overlay")
        return self._new_volume(
            spec.pool, spec.name, spec.capacity_bytes, "qcow2", backing_path=spec.backing_path
        )

    def create_blank(self, *, pool: str, name: str, capacity_bytes: int, format: str) -> VolumeInfo:
        self._enter("create_blank")
        return self._new_volume(pool, name, capacity_bytes, format)

    def upload_volume(self, *, pool: str, name: str, data: bytes) -> VolumeInfo:
        self._enter("upload_volume")
        vol = self._new_volume(pool, name, len(data), "raw")
        self.uploads[(pool, name)] = data
        return vol

    def upload_stream(
        self, *, pool: str, name: str, size: int, chunks: Iterable[bytes]
    ) -> VolumeInfo:
        self._enter("upload_stream")
        vol = self._new_volume(pool, name, size, "raw")
        try:
            data = b"".join(chunks)
            if len(data) != size:
                raise PermanentError(f"{len(data)} bytes arrived, {size} were announced")
        except BaseException:
            del self.volumes[(pool, name)]
            raise
        self.uploads[(pool, name)] = data
        return vol

    def grow_attached_disk(self, uuid: str, *, target: str, capacity_bytes: int) -> None:
        self._enter("grow_attached_disk")
        root = etree.fromstring(self._dom(uuid).xml.encode())
        self.resized[(uuid, target)] = capacity_bytes
        for disk in root.iterfind("devices/disk"):
            dev, src = disk.find("target"), disk.find("source")
            if dev is not None and src is not None and dev.get("dev") == target:
                key = (str(src.get("pool")), str(src.get("volume")))
                if key in self.volumes:
                    self.volumes[key] = replace(self.volumes[key], capacity_bytes=capacity_bytes)

    def grow_volume(self, *, pool: str, name: str, capacity_bytes: int) -> VolumeInfo:
        self._enter("grow_volume")
        vol = self._volume(pool, name)
        if capacity_bytes < vol.capacity_bytes:
            raise PermanentError("shrinking is refused")
        grown = replace(vol, capacity_bytes=capacity_bytes)
        self.volumes[(pool, name)] = grown
        return grown

    def delete_volume(self, pool: str, name: str) -> None:
        self._enter("delete_volume")
        self._volume(pool, name)
        del self.volumes[(pool, name)]

    # Live changes edit the running definition and the persistent one alike, as libvirt does with
    # VIR_DOMAIN_AFFECT_LIVE | VIR_DOMAIN_AFFECT_CONFIG.

    def _edit(self, op: str, uuid: str, edit: Callable[[etree._Element], None]) -> None:
        self._enter(op)
        dom = self._dom(uuid)
        if dom.state is DomainState.SHUTOFF:
            raise StateConflictError(f"{op}: domain is not running")
        if not dom.persistent:
            raise StateConflictError(f"{op}: transient domains do not have any persistent config")

        def edited(xml: str) -> str:
            root = etree.fromstring(xml.encode())
            edit(root)
            return etree.tostring(root, encoding="unicode")

        # Both edited before either is kept: a refused change leaves the domain as it was.
        persistent = edited(dom.xml)
        live = edited(dom.live_xml) if dom.live_xml is not None else None
        dom.xml, dom.live_xml = persistent, live

    def set_vcpus(self, uuid: str, count: int) -> None:
        def edit(root: etree._Element) -> None:
            vcpu = root.find("vcpu")
            assert vcpu is not None
            if count > int(vcpu.text or 0):
                raise PermanentError("more vCPUs than slots")
            vcpu.set("current", str(count))

        self._edit("set_vcpus", uuid, edit)

    def set_memory(self, uuid: str, kib: int) -> None:
        def edit(root: etree._Element) -> None:
            current = root.find("currentMemory")
            assert current is not None
            current.text, current.attrib["unit"] = str(kib), "KiB"

        self._edit("set_memory", uuid, edit)

    def attach_device(self, uuid: str, xml: str) -> None:
        def edit(root: etree._Element) -> None:
            devices = root.find("devices")
            assert devices is not None
            devices.append(etree.fromstring(xml.encode()))

        self._edit("attach_device", uuid, edit)

    def detach_device(self, uuid: str, xml: str) -> None:
        wanted = etree.tostring(etree.fromstring(xml.encode()), method="c14n", with_tail=False)

        def edit(root: etree._Element) -> None:
            for element in root.findall("devices/*"):
                if etree.tostring(element, method="c14n", with_tail=False) == wanted:
                    element.getparent().remove(element)  # type: ignore[union-attr]
                    return
            raise NotFoundError("no such device")

        self._edit("detach_device", uuid, edit)

    def set_metadata(self, uuid: str, xml: str) -> None:
        element = etree.fromstring(xml.encode())
        # libvirt puts the element into this provider's namespace and replaces only the element
        # of that namespace: other tools' metadata stays.
        element.tag = f"{{{NAMESPACE}}}{etree.QName(element).localname}"

        def edit(root: etree._Element) -> None:
            metadata = root.find("metadata")
            if metadata is None:
                metadata = etree.SubElement(root, "metadata")
            for child in list(metadata):
                ours = isinstance(child.tag, str) and etree.QName(child).namespace == NAMESPACE
                if ours:
                    metadata.remove(child)
            metadata.append(copy.deepcopy(element))

        self._edit("set_metadata", uuid, edit)

    def set_block_io_tune(
        self, uuid: str, target: str, parameters: Mapping[str, int | str]
    ) -> None:
        # As libvirt writes the element: only the parameters set, none at all when none is.
        def edit(root: etree._Element) -> None:
            for disk in root.iterfind("devices/disk"):
                dev = disk.find("target")
                if dev is None or dev.get("dev") != target:
                    continue
                old = disk.find("iotune")
                if old is not None:
                    disk.remove(old)
                values = {k: v for k, v in parameters.items() if v}
                if values:
                    iotune = etree.Element("iotune")
                    for name, value in values.items():
                        etree.SubElement(iotune, name).text = str(value)
                    dev.addnext(iotune)
                return
            raise PermanentError(f"no disk {target}")

        self._edit("set_block_io_tune", uuid, edit)

    def add_lifecycle_listener(self, listener: LifecycleListener) -> None:
        self.listeners.append(listener)

    # -- scripting helpers for tests ---------------------------------------------------------

    def fail_next(self, op: str, error: ProviderError) -> None:
        self.failures[op] = error

    def pause(self, uuid: str) -> None:
        """Something outside the controller paused the domain (`virsh suspend`, a full disk)."""
        dom = self._dom(uuid)
        if dom.state is not DomainState.RUNNING:
            raise StateConflictError("domain is not running")
        dom.state, dom.reason = DomainState.PAUSED, PAUSED_USER
        self._notify(uuid)

    def give_lease(self, uuid: str, mac: str, address: str) -> None:
        self._dom(uuid).addresses.append(
            InterfaceAddress(
                mac=mac, address=address, prefix=24, family="ipv4", source=AddressSource.LEASE
            )
        )


if TYPE_CHECKING:

    def _satisfies_protocol(fake: FakeHypervisor) -> Hypervisor:
        return fake
