"""The plain values that cross the hypervisor interface: states, references, facts, volumes.

Pure data, no I/O: the pure core (power state machine, status, resolver) uses them without
depending on the interface or on libvirt.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "AddressSource",
    "DomainRef",
    "DomainState",
    "DomainStats",
    "DomainStatus",
    "GuestInfo",
    "HostFacts",
    "HostInventory",
    "InterfaceAddress",
    "LifecycleListener",
    "NetworkDhcp",
    "OverlaySpec",
    "PendingOverlay",
    "PoolInfo",
    "VolumeInfo",
]


class DomainState(enum.Enum):
    """libvirt's domain states, one member each, so every state is mapped on purpose."""

    NOSTATE = "nostate"
    RUNNING = "running"
    BLOCKED = "blocked"
    PAUSED = "paused"
    SHUTTING_DOWN = "shutting-down"
    SHUTOFF = "shutoff"
    CRASHED = "crashed"
    PMSUSPENDED = "pmsuspended"


class AddressSource(enum.StrEnum):
    """Where an interface address was learned; recorded so users know how far to trust it."""

    LEASE = "lease"
    AGENT = "agent"
    ARP = "arp"


@dataclass(frozen=True)
class DomainRef:
    uuid: str
    name: str


@dataclass(frozen=True)
class DomainStatus:
    state: DomainState
    # libvirt's reason code for the state (e.g. why it is shut off); kept for messages.
    reason: int
    has_managed_save: bool
    # Paused by qemu because a disk write failed (typically a full pool): resuming it would
    # only fail again.
    paused_by_io_error: bool = False


@dataclass(frozen=True)
class InterfaceAddress:
    mac: str
    address: str
    prefix: int
    family: str  # "ipv4" or "ipv6"
    source: AddressSource


@dataclass(frozen=True)
class GuestInfo:
    """What a running domain's qemu guest agent says about the guest.

    `agent` is the agent channel's state as libvirt sees it (`connected` or `disconnected`);
    `facts` holds libvirt's guest-info keys (`os.name`, `os.version`, `os.kernel-release`,
    `hostname`, ...) and is empty unless the agent is connected and answered.
    """

    agent: str
    facts: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NetworkDhcp:
    """The DHCP a libvirt network's dnsmasq serves: its dynamic ranges, the subnets they are in,
    and its host reservations (MAC -> IP)."""

    network: str
    ranges: tuple[tuple[str, str], ...]
    subnets: tuple[str, ...]
    hosts: Mapping[str, str] = field(default_factory=dict)
    leases: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    """IP -> (MAC, expiry in seconds since the epoch) of the leases its DHCP server holds now."""


@dataclass(frozen=True)
class VolumeInfo:
    pool: str
    name: str
    path: str
    capacity_bytes: int
    allocation_bytes: int
    format: str | None
    backing_path: str | None


@dataclass(frozen=True)
class OverlaySpec:
    """A copy-on-write volume over a base volume, grown to `capacity_bytes`."""

    pool: str
    name: str
    backing_path: str
    backing_format: str
    capacity_bytes: int


@dataclass(frozen=True)
class PendingOverlay:
    """Where a running domain's disk `target` writes while a snapshot copies its volume: a qcow2
    file (`path`, a volume made beforehand) backed by that volume."""

    target: str
    path: str


@dataclass(frozen=True)
class HostFacts:
    hostname: str
    arch: str
    # Domain types the host's capabilities offer for its arch, e.g. {"qemu", "kvm"}.
    domain_types: frozenset[str]
    pools: frozenset[str]
    networks: frozenset[str]
    # Where serial consoles are logged on this host (the daemon's setting, not libvirt's): None
    # keeps no log. qemu (or virtlogd) must be able to write there.
    console_log_dir: str | None = None
    # The host's zone label on its LibvirtHost (the daemon's knowledge, not libvirt's).
    zone: str | None = None


@dataclass(frozen=True)
class PoolInfo:
    name: str
    capacity: int
    available: int


@dataclass(frozen=True)
class HostInventory:
    """What a host has and offers, as libvirt reports it: the facts a LibvirtHost's status shows
    and placement decides on."""

    cpus: int
    memory: int
    pools: tuple[PoolInfo, ...]
    networks: frozenset[str]
    domain_types: frozenset[str]
    machine_types: frozenset[str]
    uefi: bool
    libvirt_version: str
    hypervisor_version: str


LifecycleListener = Callable[[str], None]
"""Called with a domain UUID whenever libvirt reports a lifecycle event for that domain."""


@dataclass(frozen=True)
class DomainStats:
    """One domain's record from libvirt's bulk statistics: its UUID and name, and the typed
    parameters libvirt returned (`cpu.time`, `block.0.rd.bytes`, ...), whatever it reported."""

    uuid: str
    name: str
    values: Mapping[str, object] = field(default_factory=dict)
