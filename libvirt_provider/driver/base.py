"""The hypervisor interface the controller talks to, and the plain values that cross it.

The controller never sees a libvirt object: it asks this interface for facts and actions by
domain UUID and volume name. The real adapter (`libvirt_driver`) and the in-memory double
(`fake`) both satisfy it, so controller logic is unit-tested without a hypervisor and the e2e tests
prove the real adapter.

Methods raise the classes of `libvirt_provider.errors`; they never return libvirt error codes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "AddressSource",
    "DomainRef",
    "DomainState",
    "DomainStatus",
    "GuestInfo",
    "HostFacts",
    "Hypervisor",
    "InterfaceAddress",
    "LifecycleListener",
    "OverlaySpec",
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


LifecycleListener = Callable[[str], None]
"""Called with a domain UUID whenever libvirt reports a lifecycle event for that domain."""


class Hypervisor(Protocol):
    def host_facts(self) -> HostFacts: ...

    def lookup(self, *, uuid: str, name: str) -> DomainRef | None:
        """The domain with this UUID; None if neither it nor any domain with `name` exists.

        Raises ForeignDomainError when only a domain with another UUID holds `name`.
        """
        ...

    def define(self, xml: str) -> DomainRef: ...

    def start(self, uuid: str) -> None: ...

    def set_autostart(self, uuid: str, autostart: bool) -> None:
        """Whether libvirtd starts the domain when it starts (a host reboot)."""
        ...

    def shutdown(self, uuid: str) -> None:
        """Ask the guest to power off: through its guest agent when one is connected, else with
        the ACPI power button."""
        ...

    def destroy(self, uuid: str) -> None:
        """Power off at once, without the guest."""
        ...

    def managed_save(self, uuid: str) -> None:
        """Save memory to disk and stop; the next start resumes from the image."""
        ...

    def discard_saved_state(self, uuid: str) -> None:
        """Drop a managed-save image, so the next start is a cold boot."""
        ...

    def resume(self, uuid: str) -> None:
        """Unpause a paused domain."""
        ...

    def undefine(self, uuid: str) -> None:
        """Remove the definition with NVRAM, managed save, snapshot, checkpoint and TPM state."""
        ...

    def status(self, uuid: str) -> DomainStatus: ...

    def domain_xml(self, uuid: str, *, inactive: bool = False) -> str: ...

    def disk_sources(self, uuid: str) -> list[str]:
        """Paths of the disks and CD-ROMs of the persistent definition (pool volumes resolved)."""
        ...

    def addresses(self, uuid: str, source: AddressSource) -> list[InterfaceAddress]: ...

    def guest_info(self, uuid: str) -> GuestInfo | None:
        """The guest agent's view of a running domain; None when it has no agent channel."""
        ...

    def find_volume(self, pool: str, name: str) -> VolumeInfo | None: ...

    def list_volumes(self, pool: str) -> list[VolumeInfo]: ...

    def create_overlay(self, spec: OverlaySpec) -> VolumeInfo: ...

    def create_blank(self, *, pool: str, name: str, capacity_bytes: int, format: str) -> VolumeInfo:
        """An empty volume (qcow2 or raw) of `capacity_bytes`."""
        ...

    def upload_volume(self, *, pool: str, name: str, data: bytes) -> VolumeInfo:
        """A raw volume holding exactly `data` (small payloads such as a cloud-init ISO)."""
        ...

    def upload_stream(
        self, *, pool: str, name: str, size: int, chunks: Iterable[bytes]
    ) -> VolumeInfo:
        """A volume holding exactly the `size` bytes that `chunks` yields, streamed (never held in
        memory whole); libvirt re-reads its format and capacity afterwards. On any failure the
        half-written volume is removed."""
        ...

    def grow_attached_disk(self, uuid: str, *, target: str, capacity_bytes: int) -> None:
        """Grow the disk `target` (e.g. vda) of a running domain; qemu resizes its volume."""
        ...

    def grow_volume(self, *, pool: str, name: str, capacity_bytes: int) -> VolumeInfo:
        """Grow a volume that is not in use by a running domain; shrinking is refused."""
        ...

    def delete_volume(self, pool: str, name: str) -> None: ...

    # Live changes: each applies to the running domain and to its persistent definition at once.

    def set_vcpus(self, uuid: str, count: int) -> None:
        """Online vCPUs (hot-plug within the definition's slots)."""
        ...

    def set_memory(self, uuid: str, kib: int) -> None:
        """The balloon target, within the boot-time ceiling."""
        ...

    def attach_device(self, uuid: str, xml: str) -> None: ...

    def detach_device(self, uuid: str, xml: str) -> None:
        """Ask the guest to release the device; the definition loses it at once."""
        ...

    def set_metadata(self, uuid: str, xml: str) -> None:
        """Replace this provider's element in `<metadata>` (the ownership marker)."""
        ...

    def add_lifecycle_listener(self, listener: LifecycleListener) -> None: ...
