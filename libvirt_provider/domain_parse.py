"""Observed domain XML -> the fields this provider owns, and what differs from the desired ones.

libvirt returns far more than we wrote: PCI addresses, controllers, emulator and firmware paths,
machine types expanded to a version (`q35` becomes `pc-q35-7.2`), memory in KiB, MACs and targets
it chose. Comparing documents would report all of that as drift. So both sides go through the same
parser, which keeps only what the renderer owns, normalised; everything else is libvirt's and is
ignored here on purpose, as are unknown elements (a round trip must not fight libvirt's defaults).

Each difference says whether it can be applied to a running domain (more vCPUs within the slots,
a balloon target within the ceiling, a NIC or data disk added or removed, metadata) or needs the
next power cycle (everything else, including cloud-init media, which the guest reads only at boot).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from lxml import etree

from libvirt_provider.constants import METADATA_NAMESPACE
from libvirt_provider.domainxml.cloudinit import CLOUD_INIT_ALIAS
from libvirt_provider.domainxml.console import GUEST_AGENT_CHANNEL

__all__ = [
    "Change",
    "DiskFacts",
    "DomainDiff",
    "NicFacts",
    "OwnedFields",
    "OwnerMarker",
    "diff_owned",
    "differences",
    "owned_fields",
    "owner_marker",
]

_NS = {"vm": METADATA_NAMESPACE}
_KIB = {"b": 1 / 1024, "bytes": 1 / 1024, "k": 1, "kib": 1, "kb": 1000 / 1024, "m": 1024}
_KIB |= {"mib": 1024, "mb": 10**6 / 1024, "g": 2**20, "gib": 2**20, "gb": 10**9 / 1024}
_KIB |= {"t": 2**30, "tib": 2**30, "tb": 10**12 / 1024}


@dataclass(frozen=True)
class OwnerMarker:
    """The ownership marker from `<metadata>`: which LibvirtMachine this domain belongs to."""

    namespace: str
    name: str
    uid: str
    virtual_machine: str


@dataclass(frozen=True)
class DiskFacts:
    key: str  # the user alias (ua-disk-<name>), else the target
    pool: str | None
    volume: str | None
    format: str | None
    bus: str | None
    target: str | None
    serial: str | None
    boot: bool


@dataclass(frozen=True)
class NicFacts:
    mac: str
    alias: str | None
    kind: str | None
    source: str | None
    mode: str | None
    model: str | None


@dataclass(frozen=True)
class OwnedFields:
    """What the renderer writes, as comparable values. Missing elements read as None."""

    name: str | None
    uuid: str | None
    domain_type: str | None
    owner: OwnerMarker | None
    tags: Mapping[str, str] = field(default_factory=dict)
    cloud_init_digest: str | None = None
    vcpus: int | None = None
    max_vcpus: int | None = None
    cpu_mode: str | None = None
    cpu_model: str | None = None
    topology: tuple[int, int, int] | None = None
    memory_max_kib: int | None = None
    memory_current_kib: int | None = None
    hugepage_kib: int | None = None
    arch: str | None = None
    machine_type: str | None = None
    firmware: str = "bios"
    secure_boot: bool = False
    smm: bool = False
    disks: Mapping[str, DiskFacts] = field(default_factory=dict)
    cdrom: DiskFacts | None = None
    nics: Mapping[str, NicFacts] = field(default_factory=dict)
    serial_console: bool = False
    serial_log: str | None = None
    graphics: tuple[str, ...] = ()
    guest_agent: bool = False


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _kib(element: etree._Element | None) -> int | None:
    if element is None or element.text is None:
        return None
    value = _int(element.text.strip())
    factor = _KIB.get((element.get("unit") or "KiB").lower())
    return None if value is None or factor is None else round(value * factor)


def owner_marker(root: etree._Element) -> OwnerMarker | None:
    """The ownership marker of a parsed domain, or None when the domain is not ours."""
    machine = root.find("metadata/vm:machine", _NS)
    if machine is None:
        return None
    values = [machine.get(k) for k in ("namespace", "name", "uid", "virtualMachine")]
    if any(v is None for v in values):
        return None
    namespace, name, uid, vm = (str(v) for v in values)
    return OwnerMarker(namespace=namespace, name=name, uid=uid, virtual_machine=vm)


def _disk(element: etree._Element) -> DiskFacts:
    source = element.find("source")
    target = element.find("target")
    driver = element.find("driver")
    alias = element.find("alias")
    alias_name = alias.get("name") if alias is not None else None
    target_dev = target.get("dev") if target is not None else None
    return DiskFacts(
        key=alias_name or target_dev or "?",
        pool=source.get("pool") if source is not None else None,
        volume=source.get("volume") if source is not None else None,
        format=driver.get("type") if driver is not None else None,
        bus=target.get("bus") if target is not None else None,
        target=target_dev,
        serial=element.findtext("serial"),
        boot=element.find("boot") is not None,
    )


def _nic(element: etree._Element) -> NicFacts | None:
    mac = element.find("mac")
    if mac is None or mac.get("address") is None:
        return None
    source = element.find("source")
    model = element.find("model")
    kind = element.get("type")
    device = None
    if source is not None:
        device = source.get({"network": "network", "bridge": "bridge"}.get(kind or "", "dev"))
    alias = element.find("alias")
    return NicFacts(
        mac=str(mac.get("address")).lower(),
        alias=alias.get("name") if alias is not None else None,
        kind=kind,
        source=device,
        mode=source.get("mode") if source is not None and kind == "direct" else None,
        model=model.get("type") if model is not None else None,
    )


def owned_fields(xml: str | bytes | etree._Element) -> OwnedFields:
    """Parse domain XML (ours or libvirt's version of it) into the fields this provider owns."""
    root = etree.fromstring(xml) if isinstance(xml, str | bytes) else xml
    machine = root.find("metadata/vm:machine", _NS)
    tags: dict[str, str] = {}
    digest = None
    if machine is not None:
        for tag in machine.findall("vm:tag", _NS):
            tags[tag.get("key") or ""] = tag.get("value") or ""
        cloud_init = machine.find("vm:cloudInit", _NS)
        digest = cloud_init.get("digest") if cloud_init is not None else None

    vcpu = root.find("vcpu")
    max_vcpus = _int(vcpu.text) if vcpu is not None else None
    vcpus = _int(vcpu.get("current")) if vcpu is not None and vcpu.get("current") else max_vcpus
    cpu = root.find("cpu")
    topology_element = cpu.find("topology") if cpu is not None else None
    topology = None
    if topology_element is not None:
        parts = [_int(topology_element.get(k)) for k in ("sockets", "cores", "threads")]
        if all(p is not None for p in parts):
            topology = (int(parts[0] or 0), int(parts[1] or 0), int(parts[2] or 0))
    page = root.find("memoryBacking/hugepages/page")
    hugepage = None
    if page is not None:
        hugepage = round(
            (_int(page.get("size")) or 0) * _KIB.get(page.get("unit", "kib").lower(), 1)
        )

    os_element = root.find("os")
    os_type = os_element.find("type") if os_element is not None else None
    firmware = os_element.get("firmware") if os_element is not None else None
    secure_boot = False
    loader = os_element.find("loader") if os_element is not None else None
    if os_element is not None:
        for feature in os_element.findall("firmware/feature"):
            if feature.get("name") == "secure-boot":
                secure_boot = feature.get("enabled") == "yes"
        if loader is not None and loader.get("secure") == "yes":
            secure_boot = True
    if firmware is None and loader is not None and loader.get("type") == "pflash":
        firmware = "efi"  # libvirt may resolve autoselection into an explicit loader

    disks: dict[str, DiskFacts] = {}
    cdrom = None
    for element in root.findall("devices/disk"):
        facts = _disk(element)
        if element.get("device") == "cdrom":
            if facts.key == CLOUD_INIT_ALIAS or cdrom is None:
                cdrom = facts
        elif element.get("device", "disk") == "disk":
            disks[facts.key] = facts
    nics = {n.mac: n for n in map(_nic, root.findall("devices/interface")) if n is not None}
    serial_log = root.find("devices/serial/log")
    agent = any(
        t.get("name") == GUEST_AGENT_CHANNEL for t in root.findall("devices/channel/target")
    )
    return OwnedFields(
        name=root.findtext("name"),
        uuid=(root.findtext("uuid") or "").lower() or None,
        domain_type=root.get("type"),
        owner=owner_marker(root),
        tags=tags,
        cloud_init_digest=digest,
        vcpus=vcpus,
        max_vcpus=max_vcpus,
        cpu_mode=cpu.get("mode", "custom") if cpu is not None else None,
        cpu_model=cpu.findtext("model") if cpu is not None else None,
        topology=topology,
        memory_max_kib=_kib(root.find("memory")),
        memory_current_kib=_kib(root.find("currentMemory")) or _kib(root.find("memory")),
        hugepage_kib=hugepage,
        arch=os_type.get("arch") if os_type is not None else None,
        machine_type=os_type.get("machine") if os_type is not None else None,
        firmware=firmware or "bios",
        secure_boot=secure_boot,
        smm=root.find("features/smm[@state='on']") is not None,
        disks=disks,
        cdrom=cdrom,
        nics=nics,
        serial_console=root.find("devices/serial") is not None,
        serial_log=serial_log.get("file") if serial_log is not None else None,
        graphics=tuple(sorted(g.get("type") or "" for g in root.findall("devices/graphics"))),
        guest_agent=agent,
    )


@dataclass(frozen=True)
class Change:
    """One owned field that differs; `live` when it can be applied to a running domain."""

    what: str
    desired: Any
    observed: Any
    live: bool
    # Values derived from Secrets (the cloud-init digest) stay out of messages and status.
    redacted: bool = False

    def __str__(self) -> str:
        if self.redacted:
            return f"{self.what} changed"
        return f"{self.what}: {self.observed!r} -> {self.desired!r}"


@dataclass(frozen=True)
class DomainDiff:
    changes: tuple[Change, ...] = ()

    @property
    def up_to_date(self) -> bool:
        return not self.changes

    @property
    def needs_power_off(self) -> bool:
        return any(not c.live for c in self.changes)

    @property
    def live(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.live)

    def describe(self) -> list[str]:
        return [str(c) for c in self.changes]


def _machine_types_match(desired: str | None, observed: str | None) -> bool:
    # libvirt pins an alias to the newest versioned type at define time; that is not drift.
    if desired == observed or desired is None or observed is None:
        return desired == observed
    if desired == "q35":
        return observed.startswith("pc-q35-")
    if desired == "pc":
        return observed.startswith("pc-i440fx-") or observed == "pc"
    return False


def _cpu_mode(value: OwnedFields) -> str | None:
    # <cpu> carrying only a topology is libvirt's "custom" without a model: the default CPU.
    if value.cpu_mode == "custom" and value.cpu_model is None:
        return None
    return value.cpu_mode


_CLOUD_INIT = "cloud-init data"

# Scalar owned fields: (label, getter, applies live). Live ones have a libvirt API that changes a
# running domain (vCPU hotplug within the slots, balloon within the ceiling, setMetadata).
_SCALARS: tuple[tuple[str, Callable[[OwnedFields], Any], bool], ...] = (
    ("domain name", lambda f: f.name, False),
    ("UUID", lambda f: f.uuid, False),
    ("domain type", lambda f: f.domain_type, False),
    ("vCPU slots", lambda f: f.max_vcpus, False),
    ("CPU mode", _cpu_mode, False),
    ("CPU model", lambda f: f.cpu_model, False),
    ("CPU topology", lambda f: f.topology, False),
    ("memory ceiling (KiB)", lambda f: f.memory_max_kib, False),
    ("huge pages (KiB)", lambda f: f.hugepage_kib, False),
    ("architecture", lambda f: f.arch, False),
    ("firmware", lambda f: f.firmware, False),
    ("secure boot", lambda f: f.secure_boot, False),
    ("system management mode", lambda f: f.smm, False),
    ("serial console", lambda f: f.serial_console, False),
    ("serial console log", lambda f: f.serial_log, False),
    ("graphics", lambda f: f.graphics, False),
    ("guest agent channel", lambda f: f.guest_agent, False),
    (_CLOUD_INIT, lambda f: f.cloud_init_digest, False),
    ("ownership marker", lambda f: f.owner, True),
    ("tags", lambda f: dict(f.tags), True),
)


_CPU_CHOICE = frozenset({"CPU mode", "CPU model"})


def _libvirt_default_cpu(observed: OwnedFields) -> bool:
    # A qemu (TCG) domain defined without <cpu> comes back from libvirt (seen with 9.0) as
    # <cpu mode='custom'><model>qemu64</model>: libvirt's own pick for "the default CPU", not drift.
    return (
        observed.domain_type == "qemu"
        and observed.cpu_mode == "custom"
        and observed.cpu_model == "qemu64"
    )


def diff_owned(desired: OwnedFields, observed: OwnedFields) -> DomainDiff:
    """What must change for `observed` to match `desired`, each change marked live or not."""
    changes: list[Change] = []
    for label, get, live in _SCALARS:
        if label in _CPU_CHOICE and _cpu_mode(desired) is None and _libvirt_default_cpu(observed):
            continue
        want, have = get(desired), get(observed)
        if want != have:
            changes.append(Change(label, want, have, live, redacted=label == _CLOUD_INIT))
    if not _machine_types_match(desired.machine_type, observed.machine_type):
        changes.append(Change("machine type", desired.machine_type, observed.machine_type, False))
    if desired.vcpus != observed.vcpus:
        # Adding vCPUs within the slots is live; removing one needs the guest to let it go, which
        # it may never do (libvirt then times out), so fewer vCPUs wait for the next power cycle.
        fits = desired.max_vcpus == observed.max_vcpus and (desired.vcpus or 0) > (
            observed.vcpus or 0
        )
        changes.append(Change("vCPUs", desired.vcpus, observed.vcpus, fits))
    if desired.memory_current_kib != observed.memory_current_kib:
        fits = desired.memory_max_kib == observed.memory_max_kib
        changes.append(
            Change("memory (KiB)", desired.memory_current_kib, observed.memory_current_kib, fits)
        )
    if _cdrom_view(desired.cdrom) != _cdrom_view(observed.cdrom):
        changes.append(
            Change(
                "cloud-init media", _cdrom_view(desired.cdrom), _cdrom_view(observed.cdrom), False
            )
        )
    changes.extend(_keyed("disk", desired.disks, observed.disks, _disk_view, _disk_live))
    changes.extend(_keyed("interface", desired.nics, observed.nics, _nic_view, lambda *_: True))
    return DomainDiff(tuple(changes))


def _cdrom_view(disk: DiskFacts | None) -> tuple[Any, ...] | None:
    return None if disk is None else (disk.pool, disk.volume, disk.bus, disk.target)


def _disk_view(disk: DiskFacts) -> tuple[Any, ...]:
    return tuple(getattr(disk, f.name) for f in fields(disk))


def _nic_view(nic: NicFacts) -> tuple[Any, ...]:
    return tuple(getattr(nic, f.name) for f in fields(nic))


def _disk_live(disk: DiskFacts, _: bool) -> bool:
    # Data disks hot-plug on virtio and SCSI; the boot disk, and IDE/SATA, need a power cycle.
    return not disk.boot and disk.bus in ("virtio", "scsi")


def _keyed(
    what: str,
    desired: Mapping[str, Any],
    observed: Mapping[str, Any],
    view: Callable[[Any], tuple[Any, ...]],
    hotplug: Callable[[Any, bool], bool],
) -> list[Change]:
    changes = []
    for key in sorted(set(desired) | set(observed)):
        want, have = desired.get(key), observed.get(key)
        if want is not None and have is not None:
            if view(want) != view(have):
                changes.append(Change(f"{what} {key}", view(want), view(have), False))
        elif want is not None:
            changes.append(Change(f"{what} {key} added", view(want), None, hotplug(want, True)))
        elif have is not None:
            changes.append(Change(f"{what} {key} removed", None, view(have), hotplug(have, False)))
    return changes


def differences(current: str, desired: str) -> list[str]:
    """Readable differences between a domain's current (inactive) XML and the desired XML;
    empty when the domain is up to date in every field this provider owns."""
    return diff_owned(owned_fields(desired), owned_fields(current)).describe()
