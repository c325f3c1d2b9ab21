"""Which cached base images on a host may be deleted: the rule, as a pure function.

Cached bases would otherwise pile up forever: every checksum ever imported stays in the pool. A
base (with its `.verified` marker) is deleted when all of these hold:

1. no LibvirtImage in the cluster resolves to it (its object is gone, or its sha256 or format
   changed), and no LibvirtImage names it as a pool volume;
2. no volume in any pool of the host is backed by it (overlays of live machines, kept data disks);
3. the importer is not using it: no import of it runs, and it was not handed to a machine being
   created during the pass (see `ImageImporter.claim_for_collection`).

Only volumes named the way the importer names them (`libvirt_provider.images.names`) are ever
candidates, so a user's own volume is never touched, whatever LibvirtImages say.

The shell lists the images and the host's volumes, asks `plan_collection`, and deletes.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from libvirt_provider.images.names import image_base_name, marker_name, parse_cached_name

__all__ = [
    "CachedBase",
    "Collection",
    "PoolVolume",
    "References",
    "plan_collection",
    "references",
]

Key = tuple[str, str]  # (pool, base volume name)


@dataclass(frozen=True)
class PoolVolume:
    """What the rule needs to know of one volume of the host."""

    pool: str
    name: str
    path: str
    backing_path: str | None = None


@dataclass(frozen=True)
class References:
    """What the cluster's LibvirtImages point at."""

    # Base names http images resolve to, in whatever pool a disk puts them.
    names: frozenset[str] = frozenset()
    # (pool, volume) of images whose source is a pool volume.
    volumes: frozenset[Key] = frozenset()

    def keep(self, key: Key) -> bool:
        return key[1] in self.names or key in self.volumes


def references(images: Iterable[Mapping[str, Any]]) -> References:
    """The bases LibvirtImages resolve to, read from the raw objects.

    Read leniently: an object the models would refuse still protects what it seems to name, since
    keeping a base too long costs disk space while deleting one too early breaks machines.
    """
    names: set[str] = set()
    volumes: set[Key] = set()
    for obj in images:
        if not isinstance(obj, Mapping):
            continue
        if (base := image_base_name(obj)) is not None:
            names.add(base)
        spec = obj.get("spec")
        source = spec.get("source") if isinstance(spec, Mapping) else None
        volume = source.get("volume") if isinstance(source, Mapping) else None
        if isinstance(volume, Mapping):
            pool, name = volume.get("pool"), volume.get("volume")
            if isinstance(pool, str) and isinstance(name, str):
                volumes.add((pool, name))
    return References(names=frozenset(names), volumes=frozenset(volumes))


@dataclass(frozen=True)
class CachedBase:
    """A cached base in one pool, as found: the base volume, its marker, or both."""

    pool: str
    volume: str
    path: str | None  # None when only the marker is left
    marker: bool

    @property
    def key(self) -> Key:
        return (self.pool, self.volume)

    @property
    def deletions(self) -> tuple[str, ...]:
        """Marker first: an interruption then leaves an unverified base, which is never used."""
        names = [marker_name(self.volume)] if self.marker else []
        if self.path is not None:
            names.append(self.volume)
        return tuple(names)


@dataclass(frozen=True)
class Collection:
    delete: tuple[CachedBase, ...]
    # Unused but busy in the importer now: worth another look once that has passed.
    deferred: tuple[CachedBase, ...]


def cached_bases(volumes: Iterable[PoolVolume]) -> list[CachedBase]:
    """Every base (or lone marker) the importer's naming finds among `volumes`."""
    found: dict[Key, tuple[str | None, bool]] = {}
    for vol in volumes:
        parsed = parse_cached_name(vol.name)
        if parsed is None:
            continue
        key = (vol.pool, parsed.base)
        path, marker = found.get(key, (None, False))
        if parsed.marker:
            marker = True
        else:
            path = vol.path
        found[key] = (path, marker)
    return [
        CachedBase(pool=pool, volume=name, path=path, marker=marker)
        for (pool, name), (path, marker) in sorted(found.items())
    ]


def plan_collection(
    volumes: Iterable[PoolVolume], refs: References, busy: frozenset[Key] = frozenset()
) -> Collection:
    """The cached bases to delete now, and those kept only because the importer is busy."""
    listed = list(volumes)
    backing = {posixpath.normpath(v.backing_path) for v in listed if v.backing_path}
    delete: list[CachedBase] = []
    deferred: list[CachedBase] = []
    for base in cached_bases(listed):
        if refs.keep(base.key):
            continue
        if base.path is not None and posixpath.normpath(base.path) in backing:
            continue
        (deferred if base.key in busy else delete).append(base)
    return Collection(delete=tuple(delete), deferred=tuple(deferred))
