"""The hypervisor interface the controller talks to, split by role.

The controller never sees a libvirt object: it asks these interfaces for facts and actions by
domain UUID and volume name. The real adapter (`libvirt_driver`) implements them all; a part of
the code depends only on the roles it uses (the image code on `PoolAccess`: host facts and
volumes), so its test doubles stay small. The plain values crossing the interface are in `types`.

Methods raise the classes of `libvirt_provider.errors`; they never return libvirt error codes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from libvirt_provider.driver.types import (
    AddressSource,
    DomainRef,
    DomainStats,
    DomainStatus,
    GuestInfo,
    HostFacts,
    InterfaceAddress,
    LifecycleListener,
    NetworkDhcp,
    OverlaySpec,
    PendingOverlay,
    VolumeInfo,
)

__all__ = [
    "DomainControl",
    "DomainStatistics",
    "HostInfo",
    "Hypervisor",
    "LifecycleEvents",
    "LiveOperations",
    "MigrationCalls",
    "MigrationHypervisor",
    "NetworkReservations",
    "PoolAccess",
    "SnapshotCopies",
    "SnapshotHypervisor",
    "VolumeStore",
]


class HostInfo(Protocol):
    """What the host offers: its name, architecture, domain types, pools and networks."""

    def host_facts(self) -> HostFacts: ...


class DomainControl(Protocol):
    """Defining, powering, inspecting and removing domains, by UUID."""

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


class DomainStatistics(Protocol):
    """What /metrics reads per scrape: every running domain's statistics in one call (not part
    of `Hypervisor`: the machine loop never reads them)."""

    def domain_stats(self) -> list[DomainStats]: ...


class VolumeStore(Protocol):
    """Volumes in the host's storage pools: find, create, fill, grow, delete."""

    def find_volume(self, pool: str, name: str) -> VolumeInfo | None: ...
    def list_volumes(self, pool: str) -> list[VolumeInfo]: ...
    def volume_names(self, pool: str) -> list[str]:
        """The names of the volumes in `pool`: one call, however many volumes there are."""
        ...

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

    def grow_volume(self, *, pool: str, name: str, capacity_bytes: int) -> VolumeInfo:
        """Grow a volume that is not in use by a running domain; shrinking is refused."""
        ...

    def delete_volume(self, pool: str, name: str) -> None: ...
    def pool_available(self, pool: str) -> int | None:
        """Free bytes in `pool` as libvirt accounts them; None when it cannot say."""
        ...


class LiveOperations(Protocol):
    """Changes to a running domain; each applies to the running domain and to its persistent
    definition at once."""

    def grow_attached_disk(self, uuid: str, *, target: str, capacity_bytes: int) -> None:
        """Grow the disk `target` (e.g. vda) of a running domain; qemu resizes its volume."""
        ...

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

    def set_block_io_tune(
        self, uuid: str, target: str, parameters: Mapping[str, int | str]
    ) -> None:
        """The I/O limits of the disk `target` (libvirt's `<iotune>` names; 0 clears one)."""
        ...


class NetworkReservations(Protocol):
    """A libvirt network's DHCP and its host reservations (how a public address reaches a guest
    on a network libvirt's DHCP serves)."""

    def network_dhcp(self, network: str) -> NetworkDhcp | None:
        """The network's DHCP; None when it serves none or does not exist on this host."""
        ...

    def reserve_address(self, network: str, *, mac: str, address: str) -> None:
        """`address` for `mac`, live and persistent; an entry that gives the address to another
        MAC, or the MAC another address, is replaced."""
        ...

    def release_reservation(self, network: str, *, mac: str, address: str) -> None:
        """Remove that reservation; nothing when there is none or the network is gone."""
        ...


class LifecycleEvents(Protocol):
    """libvirt's lifecycle events, by domain UUID."""

    def add_lifecycle_listener(self, listener: LifecycleListener) -> None: ...


class SnapshotCopies(Protocol):
    """What taking a snapshot needs beyond volumes and domains (docs/snapshots.md)."""

    def copy_volume(self, *, pool: str, source: str, target: str) -> VolumeInfo:
        """A new volume `target` holding `source`'s bytes (an overlay stays an overlay on the
        same image); nothing is left behind on failure."""
        ...

    def divert_writes(
        self, uuid: str, overlays: Sequence[PendingOverlay], *, quiesce: bool
    ) -> None:
        """From now on the running domain writes these disks into their pending overlays, all
        at one instant (with `quiesce`, its file systems frozen for it by the guest agent, or
        `GuestAgentUnavailableError` and nothing done)."""
        ...

    def merge_writes(self, uuid: str, target: str, *, timeout: float) -> None:
        """Merge disk `target`'s pending overlay back into its volume, which the domain then
        writes again."""
        ...

    def thaw(self, uuid: str) -> None:
        """Thaw the guest's file systems (no-op when not frozen)."""
        ...


class SnapshotHypervisor(HostInfo, DomainControl, VolumeStore, SnapshotCopies, Protocol):
    """Everything the snapshot loop uses (the host's pools: a deletion looks for clones in all)."""


class MigrationCalls(Protocol):
    """What a live migration needs beyond domains and volumes (docs/migration.md)."""

    def migratable_xml(self, uuid: str, *, inactive: bool = False) -> str: ...
    def migrate(
        self, uuid: str, *, uri: str, dest_xml: str, persist_xml: str, auto_converge: bool = False
    ) -> None:
        """Live-migrate the running domain to the libvirtd at `uri` with its local disks (the
        target's volumes exist already, named in `dest_xml`, the definition the guest runs
        with there; `persist_xml` is the one it keeps); blocks until the job ends. With
        `auto_converge`, qemu slows the guest's vCPUs down when its memory is dirtied faster
        than it is sent."""
        ...

    def job_stats(self, uuid: str) -> dict[str, int] | None:
        """libvirt's statistics of the domain's running job; None when none runs."""
        ...

    def completed_job_stats(self, uuid: str) -> dict[str, int] | None:
        """libvirt's record of the domain's last finished job; None without the domain."""
        ...

    def abort_job(self, uuid: str) -> None:
        """Abort the running job (no-op without one)."""
        ...


class PoolAccess(HostInfo, VolumeStore, Protocol):
    """What the image code needs: the host's pools and their volumes."""


class Hypervisor(
    HostInfo,
    DomainControl,
    VolumeStore,
    LiveOperations,
    LifecycleEvents,
    NetworkReservations,
    Protocol,
):
    """Everything the machine loop uses."""


class MigrationHypervisor(Hypervisor, MigrationCalls, Protocol):
    """Everything a migration's pass uses: the machine loop's calls and the migration's."""
