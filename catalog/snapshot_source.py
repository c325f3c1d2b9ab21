"""A `LibvirtSnapshot` as a disk source: what a clone's resolution needs of it (pure values).

`spec.bootDisk.source.snapshot` and `spec.disks[].source.snapshot` name a snapshot the way
`source.image` names an image, so the resolver finds it in the same `Catalog`. The snapshot kind
itself is the provider's (`libvirt_provider.snapshot_api`), a layer above this package: the
provider's catalog reader reduces each object to this view, which holds only what a clone reads
(is it usable, where are its volumes, how large is each disk).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["SnapshotDiskSource", "SnapshotSource"]


@dataclass(frozen=True)
class SnapshotDiskSource:
    """One disk copied by the snapshot: its volume and the size the guest saw."""

    pool: str
    volume: str
    format: str
    """The volume's format (`qcow2` or `raw`), which a clone's overlay names as its backing's."""
    size_bytes: int


@dataclass(frozen=True)
class SnapshotSource:
    """A snapshot, by namespace and name, reduced to what a clone needs."""

    namespace: str
    name: str
    uid: str
    ready: bool
    """`status.readyToUse`: every copy complete. A clone never builds on a partial copy."""
    deleting: bool = False
    host: str | None = None
    disks: Mapping[str, SnapshotDiskSource] = field(default_factory=dict)
    """By the snapshot's disk name: `bootDisk`, or a data disk's name."""
    boot_image: str | None = None
    """The LibvirtImage the snapshot's machine booted from (its recorded VM spec): a clone of the
    boot disk takes its guest's firmware and buses from it."""
