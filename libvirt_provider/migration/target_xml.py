"""The domain XML the target starts the migrated guest with, and what the guest needs of a
host, read from its definition; pure.

libvirt's incremental storage migration copies each disk's top image into a volume that must
already exist on the target. So the source's migratable XML is passed as
`VIR_MIGRATE_PARAM_DEST_XML` with each disk moved to the target's volume of the same name (its
pool there, or its path for a file disk) and its `backingStore` removed: the target reads the
chain from its overlay's header, which names the target's own copy of the image
(docs/migration.md, "Foundations").
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath

from lxml import etree

from libvirt_provider.domainxml import pool_volumes
from libvirt_provider.domainxml.compute import parse_compute

__all__ = ["UnmappedDiskError", "domain_needs", "memory_bytes", "target_xml"]


class UnmappedDiskError(ValueError):
    """A disk of the domain has no volume prepared on the target."""


def target_xml(xml: str, volumes: Mapping[str, tuple[str, str]], *, files: bool) -> str:
    """`xml` with every disk on the target's volume of the same name (`volumes`: volume name ->
    (pool, path) on the target). With `files`, a pool volume becomes a file disk at its path:
    libvirt checks that an incremental copy's target exists by the disk's path, which a pool
    volume's disk has only once the domain runs, and refuses the copy without it. The running
    guest on the target takes those paths; its persistent definition keeps the pool volumes."""
    root = etree.fromstring(xml.encode())
    for disk in root.iterfind("devices/disk"):
        source = disk.find("source")
        if source is None:
            continue  # an empty CD-ROM drive
        volume = source.get("volume")
        path = source.get("file")
        name = volume if volume is not None else PurePosixPath(path).name if path else None
        if name is None:
            continue
        if name not in volumes:
            raise UnmappedDiskError(f"no volume {name!r} was prepared on the target")
        pool, target_path = volumes[name]
        if volume is not None and not files:
            source.set("pool", pool)
        else:
            for attr in list(source.attrib):
                del source.attrib[attr]
            disk.set("type", "file")
            source.set("file", target_path)
        for backing in disk.findall("backingStore"):
            disk.remove(backing)
    return str(etree.tostring(root, encoding="unicode"))


def domain_needs(xml: str) -> tuple[frozenset[str], frozenset[str]]:
    """The libvirt networks and the storage pools a domain's definition uses."""
    root = etree.fromstring(xml.encode())
    networks = {
        str(source.get("network"))
        for source in root.iterfind("devices/interface/source")
        if source.get("network")
    }
    pools = {pool for pool, _ in pool_volumes(xml)}
    return frozenset(networks), frozenset(pools)


def memory_bytes(xml: str) -> int:
    """The guest memory a domain's definition gives it (its current size; 0 when it says none):
    what a live migration copies besides the disks."""
    facts = parse_compute(etree.fromstring(xml.encode()))
    return (facts.memory_current_kib or 0) * 1024
