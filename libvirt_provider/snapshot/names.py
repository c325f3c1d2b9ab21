"""Names of a snapshot's volumes: `snap-<snapshot uid>-<disk>.<extension>` (pure).

The snapshot's uid is in every name, as a machine's is in its volumes' names: a tenant chooses
names, never uids, so no snapshot can be aimed at another's volumes, a snapshot made again under
an old name gets new volumes, and one pool listing finds everything a snapshot owns, even what an
attempt interrupted by a crash left behind. No machine volume has this shape
(`naming.is_machine_volume`), so deleting a machine never deletes a snapshot's volume.

Two kinds: the copy (`copy_volume_name`), which is the snapshot, and while a running machine is
copied, the short-lived overlay that takes the machine's writes meanwhile (`pending_overlay_name`),
merged back into the machine's own volume and then deleted.
"""

from __future__ import annotations

import hashlib
import re

from libvirt_provider.constants import SNAPSHOT_VOLUME_PREFIX

__all__ = [
    "copy_volume_name",
    "is_pending_overlay",
    "owned_by",
    "pending_overlay_name",
    "snapshot_prefix",
]

_PENDING = ".pending"
_UNSAFE = re.compile(r"[^a-z0-9-]+")


def snapshot_prefix(uid: str) -> str:
    """What every volume of the snapshot `uid` starts with."""
    return f"{SNAPSHOT_VOLUME_PREFIX}{_UNSAFE.sub('-', uid.lower())}-"


def _disk_part(disk: str) -> str:
    readable = _UNSAFE.sub("-", disk.lower()).strip("-")[:40] or "disk"
    # bootDisk and a data disk `bootdisk` must not share a name: the hash tells them apart.
    return f"{readable}-{hashlib.sha256(disk.encode()).hexdigest()[:8]}"


def copy_volume_name(uid: str, disk: str, *, extension: str) -> str:
    """The volume holding the snapshot's copy of `disk`."""
    return f"{snapshot_prefix(uid)}{_disk_part(disk)}.{extension}"


def pending_overlay_name(uid: str, disk: str) -> str:
    """The overlay that takes a running machine's writes to `disk` while the snapshot copies it."""
    return f"{snapshot_prefix(uid)}{_disk_part(disk)}{_PENDING}.qcow2"


def owned_by(volume: str, uid: str) -> bool:
    """Whether `volume` is one of the snapshot `uid`'s (a copy or a pending overlay)."""
    return volume.startswith(snapshot_prefix(uid))


def is_pending_overlay(volume: str) -> bool:
    """Whether `volume` (a name or a path) is some snapshot's pending overlay."""
    name = volume.rsplit("/", 1)[-1]
    return name.startswith(SNAPSHOT_VOLUME_PREFIX) and name.endswith(f"{_PENDING}.qcow2")
