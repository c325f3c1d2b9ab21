"""An in-memory `Hypervisor` for unit tests of controller logic.

It keeps just enough libvirt behaviour to make controller tests meaningful: UUID and name
uniqueness, the define/start/shutdown/destroy/managed-save state transitions, volumes per pool and
lifecycle notifications. Tests script guest behaviour (whether it honours the power button, when it
gets a lease) and inject failures per operation. It reads no domain XML beyond name, UUID and disks.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from lxml import etree

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
    OverlaySpec,
    VolumeInfo,
)
from libvirt_provider.errors import (
    ForeignDomainError,
    NotFoundError,
    PermanentError,
    ProviderError,
    StateConflictError,
)

__all__ = ["FakeDomain", "FakeHypervisor"]


@dataclass
class FakeDomain:
    uuid: str
    name: str
    xml: str
    state: DomainState = DomainState.SHUTOFF
    has_managed_save: bool = False
    honours_power_button: bool = True
    autostart: bool = False
    addresses: list[InterfaceAddress] = field(default_factory=list)
    # What a guest agent reports while the domain runs; None: no agent channel.
    guest: GuestInfo | None = None


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
    listeners: list[LifecycleListener] = field(default_factory=list)
    uploads: dict[tuple[str, str], bytes] = field(default_factory=dict)
    resized: dict[tuple[str, str], int] = field(default_factory=dict)
    # Free bytes per pool, for the import's space check; a pool not listed does not say.
    pool_free: dict[str, int] = field(default_factory=dict)

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

    def _notify(self, uuid: str) -> None:
        for listener in list(self.listeners):
            listener(uuid)

    def host_facts(self) -> HostFacts:
        self._enter("host_facts")
        return self.facts

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
        root = etree.fromstring(xml.encode())
        name = root.findtext("name") or ""
        dom_uuid = root.findtext("uuid") or str(uuidlib.uuid4())
        for other in self.domains.values():
            if other.name == name and other.uuid != dom_uuid:
                raise StateConflictError(f"domain {name!r} already exists with uuid {other.uuid}")
        if dom_uuid in self.domains:
            self.domains[dom_uuid].xml = xml
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
            dom.state = DomainState.SHUTOFF
            dom.addresses = []
            self._notify(uuid)

    def destroy(self, uuid: str) -> None:
        self._enter("destroy")
        dom = self._dom(uuid)
        if dom.state is DomainState.SHUTOFF:
            raise StateConflictError("domain is not running")
        dom.state = DomainState.SHUTOFF
        dom.addresses = []
        self._notify(uuid)

    def managed_save(self, uuid: str) -> None:
        self._enter("managed_save")
        dom = self._dom(uuid)
        if dom.state not in (DomainState.RUNNING, DomainState.PAUSED):
            raise StateConflictError("domain is not running")
        dom.state = DomainState.SHUTOFF
        dom.has_managed_save = True
        self._notify(uuid)

    def discard_saved_state(self, uuid: str) -> None:
        self._enter("discard_saved_state")
        self._dom(uuid).has_managed_save = False

    def resume(self, uuid: str) -> None:
        self._enter("resume")
        dom = self._dom(uuid)
        if dom.state is not DomainState.PAUSED:
            raise StateConflictError("domain is not paused")
        dom.state = DomainState.RUNNING
        self._notify(uuid)

    def undefine(self, uuid: str) -> None:
        self._enter("undefine")
        self._dom(uuid)
        del self.domains[uuid]
        self._notify(uuid)

    def status(self, uuid: str) -> DomainStatus:
        self._enter("status")
        dom = self._dom(uuid)
        return DomainStatus(state=dom.state, reason=0, has_managed_save=dom.has_managed_save)

    def domain_xml(self, uuid: str, *, inactive: bool = False) -> str:
        self._enter("domain_xml")
        return self._dom(uuid).xml

    def disk_sources(self, uuid: str) -> list[str]:
        self._enter("disk_sources")
        root = etree.fromstring(self._dom(uuid).xml.encode())
        found = []
        for src in root.iterfind("devices/disk/source"):
            path = src.get("file") or src.get("dev")
            if path is None and src.get("pool") and src.get("volume"):
                path = f"/fake/{src.get('pool')}/{src.get('volume')}"
            if path:
                found.append(str(path))
        return found

    def addresses(self, uuid: str, source: AddressSource) -> list[InterfaceAddress]:
        self._enter("addresses")
        return [replace(a, source=source) for a in self._dom(uuid).addresses]

    def guest_info(self, uuid: str) -> GuestInfo | None:
        self._enter("guest_info")
        return self._dom(uuid).guest

    def find_volume(self, pool: str, name: str) -> VolumeInfo | None:
        self._enter("find_volume")
        return self.volumes.get((pool, name))

    def list_volumes(self, pool: str) -> list[VolumeInfo]:
        self._enter("list_volumes")
        return [v for (p, _), v in self.volumes.items() if p == pool]

    def pool_available(self, pool: str) -> int | None:
        self._enter("pool_available")
        return self.pool_free.get(pool)

    def volume_names(self, pool: str) -> list[str]:
        self._enter("volume_names")
        return [n for (p, n) in self.volumes if p == pool]

    def add_volume(self, pool: str, name: str, *, capacity_bytes: int = 1 << 30) -> VolumeInfo:
        """Test set-up: a volume that already exists (e.g. a cached base image)."""
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

    def create_overlay(self, spec: OverlaySpec) -> VolumeInfo:
        self._enter("create_overlay")
        if (spec.pool, spec.name) in self.volumes:
            raise StateConflictError(f"volume {spec.name!r} already exists in pool {spec.pool!r}")
        vol = VolumeInfo(
            pool=spec.pool,
            name=spec.name,
            path=f"/fake/{spec.pool}/{spec.name}",
            capacity_bytes=spec.capacity_bytes,
            allocation_bytes=0,
            format="qcow2",
            backing_path=spec.backing_path,
        )
        self.volumes[(spec.pool, spec.name)] = vol
        return vol

    def _new_volume(self, pool: str, name: str, capacity: int, fmt: str) -> VolumeInfo:
        if (pool, name) in self.volumes:
            raise StateConflictError(f"volume {name!r} already exists in pool {pool!r}")
        vol = VolumeInfo(
            pool=pool,
            name=name,
            path=f"/fake/{pool}/{name}",
            capacity_bytes=capacity,
            allocation_bytes=0,
            format=fmt,
            backing_path=None,
        )
        self.volumes[(pool, name)] = vol
        return vol

    def create_blank(self, *, pool: str, name: str, capacity_bytes: int, format: str) -> VolumeInfo:
        self._enter("create_blank")
        return self._new_volume(pool, name, capacity_bytes, format)

    def upload_volume(self, *, pool: str, name: str, data: bytes) -> VolumeInfo:
        self._enter("upload_volume")
        self.uploads[(pool, name)] = data
        return self._new_volume(pool, name, len(data), "raw")

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
        vol = self.volumes.get((pool, name))
        if vol is None:
            raise NotFoundError(f"volume {name!r} not found in pool {pool!r}")
        if capacity_bytes < vol.capacity_bytes:
            raise PermanentError("shrinking is refused")
        grown = replace(vol, capacity_bytes=capacity_bytes)
        self.volumes[(pool, name)] = grown
        return grown

    def delete_volume(self, pool: str, name: str) -> None:
        self._enter("delete_volume")
        if self.volumes.pop((pool, name), None) is None:
            raise NotFoundError(f"volume {name!r} not found in pool {pool!r}")

    # The fake keeps one definition, so live changes edit it like libvirt edits both.

    def _edit(self, op: str, uuid: str, edit: Callable[[etree._Element], None]) -> None:
        self._enter(op)
        dom = self._dom(uuid)
        if dom.state is DomainState.SHUTOFF:
            raise StateConflictError(f"{op}: domain is not running")
        root = etree.fromstring(dom.xml.encode())
        edit(root)
        dom.xml = etree.tostring(root, encoding="unicode")

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
        def edit(root: etree._Element) -> None:
            metadata = root.find("metadata")
            if metadata is None:
                metadata = etree.SubElement(root, "metadata")
            for child in list(metadata):
                metadata.remove(child)
            metadata.append(etree.fromstring(xml.encode()))

        self._edit("set_metadata", uuid, edit)

    def add_lifecycle_listener(self, listener: LifecycleListener) -> None:
        self.listeners.append(listener)

    # -- scripting helpers for tests ---------------------------------------------------------

    def fail_next(self, op: str, error: ProviderError) -> None:
        self.failures[op] = error

    def give_lease(self, uuid: str, mac: str, address: str) -> None:
        self._dom(uuid).addresses.append(
            InterfaceAddress(
                mac=mac, address=address, prefix=24, family="ipv4", source=AddressSource.LEASE
            )
        )


if TYPE_CHECKING:

    def _satisfies_protocol(fake: FakeHypervisor) -> Hypervisor:
        return fake
