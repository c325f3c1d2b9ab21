"""Two of the lab's extra hosts live-migrate a running guest between them, as the product will.

Why: live migration (LibvirtMigration, host drain) is built on what this file proves the lab can
do with libvirt alone: the hosts reach each other over their migration links, each has a host
UUID of its own, the source's libvirtd opens the target's over TLS with lab-made certificates
(peer-to-peer), qemu's stream is encrypted too (the hosts refuse a migration without
VIR_MIGRATE_TLS), and with the guest's overlay pre-created on the target over the target's own
copy of the base image (NON_SHARED_INC), only the overlay's data crosses the wire. See
docs/migration.md, "Foundations".

Cost: about 35 s (one busybox guest: 20 s to boot under TCG, 6-8 s to migrate).
"""

from __future__ import annotations

import hashlib
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import libvirt
import pytest
from lxml import etree

from tests.support.lab_access import LabHost, LabInfo
from tests.support.virt import dhcp_lease, guest_domain_xml, overlay_volume_xml
from tests.support.waiting import eventually

MiB = 1024 * 1024
# What the test writes into the guest's overlay before it boots: the guest's own data, which must
# cross the wire, at an offset its busybox system never touches.
OWN_DATA_OFFSET = 40 * MiB
OWN_DATA_SIZE = 8 * MiB
PATTERN = "0xab"

FLAGS = (
    libvirt.VIR_MIGRATE_LIVE
    | libvirt.VIR_MIGRATE_PEER2PEER
    | libvirt.VIR_MIGRATE_PERSIST_DEST
    | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
    | libvirt.VIR_MIGRATE_NON_SHARED_INC
    | libvirt.VIR_MIGRATE_TLS
)


@dataclass
class Migrated:
    """What the module's one migration left: where the guest is, and what libvirt measured."""

    name: str
    dom_uuid: str
    source: LabHost
    target: LabHost
    source_overlay: str
    target_overlay: str
    target_base: str
    target_base_sha256: str
    wall_seconds: float
    # The target's record of the finished job (memory, time, downtime; libvirt 9.0 leaves its
    # disk fields at 0 there) and the source's last report while it ran (the disk mirror's).
    completed: dict[str, int]
    last_source_stats: dict[str, int] = field(default_factory=dict)


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(MiB), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _qemu_io(path: str, command: str, *, share: bool = False) -> subprocess.CompletedProcess[str]:
    """qemu-io on a qcow2 file; `share` reads one a running qemu holds (-U, read-only)."""
    opts = ["-U", "-r"] if share else []
    return subprocess.run(
        ["qemu-io", *opts, "-f", "qcow2", "-c", command, path],
        capture_output=True,
        text=True,
        check=False,
    )


def _target_xml(dom: libvirt.virDomain, target_overlay: str) -> str:
    """The guest's migratable XML with its disk on the target's overlay: every host here sees
    the same filesystem, so the source's path would share the source's file (and the product's
    pools need not have the same paths anyway). The backing chain is left for the target to
    read from its overlay's header, which names its own base image."""
    xml = etree.fromstring(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_MIGRATABLE))
    for source in xml.findall("devices/disk/source"):
        source.set("file", target_overlay)
    for backing in xml.findall("devices/disk/backingStore"):
        parent = backing.getparent()
        assert parent is not None
        parent.remove(backing)
    return str(etree.tostring(xml, encoding="unicode"))


def _migrate(
    source: LabHost, target: LabHost, dom: libvirt.virDomain, target_xml: str
) -> tuple[float, dict[str, int]]:
    """Run the migration on a thread and read the source's job statistics while it runs (the
    disk mirror's figures are reported only there); returns the wall time and the last report."""
    errors: list[libvirt.libvirtError] = []
    reports: list[dict[str, int]] = []
    uri = target.migration_uri_from(source)
    params = {libvirt.VIR_MIGRATE_PARAM_DEST_XML: target_xml}

    def run() -> None:
        try:
            dom.migrateToURI3(uri, params, FLAGS)
        except libvirt.libvirtError as exc:
            errors.append(exc)

    # A connection of its own: the one running the migration call is busy with it.
    watcher = libvirt.open(source.uri)
    try:
        watched = watcher.lookupByUUIDString(dom.UUIDString())
        thread = threading.Thread(target=run, name="migration")
        started = time.monotonic()
        thread.start()

        def finished() -> bool:
            try:
                stats = watched.jobStats()
            except libvirt.libvirtError:
                stats = {}  # the job ended and the source undefined the domain
            if stats.get("type", libvirt.VIR_DOMAIN_JOB_NONE) != libvirt.VIR_DOMAIN_JOB_NONE:
                reports.append(stats)
            return not thread.is_alive()

        eventually(finished, timeout=120, interval=0.1, what="the migration to end")
        wall = time.monotonic() - started
    finally:
        watcher.close()
    if errors:
        raise errors[0]
    assert reports, "libvirt reported no running job on the source"
    return wall, reports[-1]


def _cleanup(conns: dict[str, libvirt.virConnect], dom_uuid: str, overlays: list[str]) -> None:
    for conn in conns.values():
        try:
            dom = conn.lookupByUUIDString(dom_uuid)
        except libvirt.libvirtError:
            continue
        if dom.isActive():
            dom.destroy()
        dom.undefine()
    for path in overlays:
        for conn in conns.values():
            try:
                conn.storageVolLookupByPath(path).delete(0)
                break
            except libvirt.libvirtError:
                continue


@pytest.fixture(scope="module")
def migrated(lab: LabInfo) -> Iterator[Migrated]:
    assert len(lab.hosts) >= 2, "migration needs two of the lab's extra hosts"
    source, target = lab.hosts[0], lab.hosts[1]
    assert source.migration_pkipath is not None, "the lab predates its migration links"
    name = "miglab-" + uuid.uuid4().hex[:8]
    dom_uuid = str(uuid.uuid4())
    conns = {source.name: libvirt.open(source.uri), target.name: libvirt.open(target.uri)}
    overlays: list[str] = []
    try:
        src_pool = conns[source.name].storagePoolLookupByName(lab.pool)
        dst_pool = conns[target.name].storagePoolLookupByName(lab.pool)
        src_base = src_pool.storageVolLookupByName(lab.guest_volume).path()
        # The target's own copy of the image (the lab put one in every host's pool; the product
        # imports it by URL and checksum) and an empty overlay of the same size over it.
        dst_base = dst_pool.storageVolLookupByName(lab.guest_volume).path()
        src_vol = src_pool.createXML(overlay_volume_xml(f"{name}.qcow2", src_base), 0)
        overlays.append(src_vol.path())
        dst_vol = dst_pool.createXML(overlay_volume_xml(f"{name}.qcow2", dst_base), 0)
        overlays.append(dst_vol.path())
        assert src_vol.info()[1] == dst_vol.info()[1]
        wrote = _qemu_io(src_vol.path(), f"write -P {PATTERN} {OWN_DATA_OFFSET} {OWN_DATA_SIZE}")
        assert wrote.returncode == 0, wrote.stderr
        dom = conns[source.name].defineXML(
            guest_domain_xml(lab, name=name, dom_uuid=dom_uuid, disk=src_vol.path())
        )
        dom.create()
        eventually(lambda: dhcp_lease(dom), timeout=180, interval=0.5, what="the guest's lease")
        base_sha = _sha256(dst_base)
        wall, last = _migrate(source, target, dom, _target_xml(dom, dst_vol.path()))
        moved = conns[target.name].lookupByUUIDString(dom_uuid)
        completed = moved.jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
        yield Migrated(
            name=name,
            dom_uuid=dom_uuid,
            source=source,
            target=target,
            source_overlay=src_vol.path(),
            target_overlay=dst_vol.path(),
            target_base=dst_base,
            target_base_sha256=base_sha,
            wall_seconds=wall,
            completed=completed,
            last_source_stats=last,
        )
    finally:
        _cleanup(conns, dom_uuid, overlays)
        for conn in conns.values():
            conn.close()


def test_the_guest_runs_on_the_target_with_its_uuid(migrated: Migrated) -> None:
    conn = libvirt.open(migrated.target.uri)
    try:
        dom = conn.lookupByUUIDString(migrated.dom_uuid)
        assert dom.name() == migrated.name
        assert dom.isPersistent()
        assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
        disk = etree.fromstring(dom.XMLDesc(0)).find("devices/disk/source")
        assert disk is not None
        assert disk.get("file") == migrated.target_overlay
        # It runs, not merely exists: its CPU time keeps growing on the target.
        before = dom.info()[4]
        eventually(lambda: dom.info()[4] > before, timeout=30, what="the guest's CPU time to grow")
    finally:
        conn.close()


def test_the_guest_is_gone_from_the_source(migrated: Migrated) -> None:
    conn = libvirt.open(migrated.source.uri)
    try:
        with pytest.raises(libvirt.libvirtError) as missing:
            conn.lookupByUUIDString(migrated.dom_uuid)
        assert missing.value.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN
    finally:
        conn.close()


def test_only_the_overlays_data_crossed_the_wire(migrated: Migrated) -> None:
    disk = migrated.last_source_stats
    # The mirror copied the overlay's allocated data (what the test wrote plus a little the guest
    # wrote while booting), not the 16 MiB base image under it.
    assert OWN_DATA_SIZE <= disk["disk_total"] < OWN_DATA_SIZE + 4 * MiB, disk
    assert disk["disk_remaining"] == 0, disk
    completed = migrated.completed
    # The guest's RAM (256 MiB) is the rest, zero pages mostly skipped.
    assert completed["memory_total"] == pytest.approx(256 * MiB, rel=0.05), completed
    assert 0 < completed["memory_processed"] <= completed["memory_total"], completed
    assert completed["downtime"] > 0, completed
    assert completed["time_elapsed"] <= migrated.wall_seconds * 1000, completed


def test_the_overlays_data_arrived_and_the_targets_base_is_untouched(migrated: Migrated) -> None:
    read = _qemu_io(
        migrated.target_overlay,
        f"read -P {PATTERN} {OWN_DATA_OFFSET} {OWN_DATA_SIZE}",
        share=True,
    )
    assert read.returncode == 0, read.stderr
    assert "Pattern verification failed" not in read.stdout, read.stdout
    assert _sha256(migrated.target_base) == migrated.target_base_sha256


def test_a_migration_without_tls_is_refused(migrated: Migrated) -> None:
    """Back from the target to the source without VIR_MIGRATE_TLS: refused before anything is
    sent, and the guest keeps running where it is."""
    conn = libvirt.open(migrated.target.uri)
    try:
        dom = conn.lookupByUUIDString(migrated.dom_uuid)
        with pytest.raises(libvirt.libvirtError, match="only with VIR_MIGRATE_TLS"):
            dom.migrateToURI3(
                migrated.source.migration_uri_from(migrated.target),
                {},
                FLAGS & ~libvirt.VIR_MIGRATE_TLS,
            )
        assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
    finally:
        conn.close()


def test_the_hosts_have_distinct_uuids_and_links_only_in_their_namespaces(
    lab: LabInfo,
) -> None:
    uuids = set()
    for host in lab.hosts:
        conn = libvirt.open(host.uri)
        try:
            caps = etree.fromstring(conn.getCapabilities())
            uuids.add(caps.findtext("host/uuid"))
        finally:
            conn.close()
        own = subprocess.run(
            ["ip", "-n", host.netns, "-o", "-4", "addr", "show"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert f"inet {host.migration_address}/" in own, own
    assert len(uuids) == len(lab.hosts), uuids
    machine = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    for host in lab.hosts:
        assert f"inet {host.migration_address}/" not in machine
