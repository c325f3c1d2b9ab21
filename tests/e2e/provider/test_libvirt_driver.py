"""The libvirt adapter against the lab's real libvirtd and the booting test guest."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor
from libvirt_provider.driver.types import AddressSource, DomainState, OverlaySpec
from libvirt_provider.errors import (
    ForeignDomainError,
    NotFoundError,
    PermanentError,
    StateConflictError,
)
from tests.support.lab_access import LabInfo
from tests.support.virt import guest_domain_xml
from tests.support.waiting import eventually

MIB = 1024 * 1024


@pytest.fixture
def hv(lab: LabInfo) -> Iterator[LibvirtHypervisor]:
    driver = LibvirtHypervisor(lab.libvirt_uri)
    yield driver
    driver.close()


def test_host_facts_describe_the_lab(hv: LibvirtHypervisor, lab: LabInfo) -> None:
    facts = hv.host_facts()
    assert "qemu" in facts.domain_types
    assert lab.pool in facts.pools
    assert lab.network in facts.networks


def test_unknown_domain_and_volume_are_reported_as_missing(
    hv: LibvirtHypervisor, lab: LabInfo
) -> None:
    assert hv.lookup(uuid=str(uuid.uuid4()), name="no-such-domain-" + uuid.uuid4().hex) is None
    assert hv.find_volume(lab.pool, "no-such-volume.qcow2") is None
    with pytest.raises(NotFoundError):
        hv.delete_volume(lab.pool, "no-such-volume.qcow2")
    with pytest.raises(NotFoundError):
        hv.status(str(uuid.uuid4()))


def test_a_foreign_domain_holding_our_name_is_refused_and_left_alone(
    hv: LibvirtHypervisor, lab: LabInfo
) -> None:
    name = "foreign-" + uuid.uuid4().hex[:8]
    theirs = str(uuid.uuid4())
    hv.define(guest_domain_xml(lab, name=name, dom_uuid=theirs, disk="/nonexistent.qcow2"))
    try:
        with pytest.raises(ForeignDomainError) as caught:
            hv.lookup(uuid=str(uuid.uuid4()), name=name)
        assert caught.value.foreign_uuid == theirs
        assert hv.status(theirs).state is DomainState.SHUTOFF
    finally:
        hv.undefine(theirs)


def test_guest_lifecycle_through_the_driver(hv: LibvirtHypervisor, lab: LabInfo) -> None:
    name = "drv-" + uuid.uuid4().hex[:8]
    dom_uuid = str(uuid.uuid4())
    base = hv.find_volume(lab.pool, lab.guest_volume)
    assert base is not None
    overlay = hv.create_overlay(
        OverlaySpec(
            pool=lab.pool,
            name=f"{name}-boot.qcow2",
            backing_path=base.path,
            backing_format="qcow2",
            capacity_bytes=128 * MIB,
        )
    )
    assert overlay.backing_path == base.path
    assert overlay.format == "qcow2"
    assert overlay.capacity_bytes == 128 * MIB

    events: list[str] = []
    seen = threading.Event()

    def on_event(event_uuid: str) -> None:
        if event_uuid == dom_uuid:
            events.append(event_uuid)
            seen.set()

    hv.add_lifecycle_listener(on_event)
    try:
        ref = hv.define(guest_domain_xml(lab, name=name, dom_uuid=dom_uuid, disk=overlay.path))
        assert ref.uuid == dom_uuid
        assert hv.lookup(uuid=dom_uuid, name=name) == ref
        assert hv.disk_sources(dom_uuid) == [overlay.path]

        hv.start(dom_uuid)
        assert seen.wait(timeout=30), "no lifecycle event for the started domain"
        assert hv.status(dom_uuid).state is DomainState.RUNNING

        leases = eventually(
            lambda: hv.addresses(dom_uuid, AddressSource.LEASE),
            timeout=180,
            interval=0.5,
            what="a DHCP lease reported through the driver",
        )
        assert leases[0].family == "ipv4"
        assert leases[0].source is AddressSource.LEASE
        assert leases[0].mac.startswith("52:54:00")

        # The test guest powers off on the ACPI power button.
        hv.shutdown(dom_uuid)
        eventually(
            lambda: hv.status(dom_uuid).state is DomainState.SHUTOFF,
            timeout=120,
            what="graceful shutdown",
        )

        hv.start(dom_uuid)
        eventually(
            lambda: hv.addresses(dom_uuid, AddressSource.LEASE),
            timeout=180,
            interval=0.5,
            what="a lease after restart",
        )
        hv.managed_save(dom_uuid)
        status = hv.status(dom_uuid)
        assert status.state is DomainState.SHUTOFF
        assert status.has_managed_save
    finally:
        if hv.lookup(uuid=dom_uuid, name=name) is not None:
            if hv.status(dom_uuid).state is not DomainState.SHUTOFF:
                hv.destroy(dom_uuid)
            hv.undefine(dom_uuid)
        hv.delete_volume(lab.pool, overlay.name)

    # Undefine removed the managed-save image too: nothing of the machine is left.
    assert hv.lookup(uuid=dom_uuid, name=name) is None
    assert hv.find_volume(lab.pool, overlay.name) is None
    assert not [v for v in hv.list_volumes(lab.pool) if v.name.startswith(name)]


def test_volume_operations(hv: LibvirtHypervisor, lab: LabInfo) -> None:
    prefix = "vol-" + uuid.uuid4().hex[:8]
    payload = b"cidata" * 50_000 + b"tail"
    try:
        blank = hv.create_blank(
            pool=lab.pool, name=f"{prefix}-data.qcow2", capacity_bytes=64 * MIB, format="qcow2"
        )
        assert (blank.format, blank.capacity_bytes) == ("qcow2", 64 * MIB)

        grown = hv.grow_volume(pool=lab.pool, name=blank.name, capacity_bytes=96 * MIB)
        assert grown.capacity_bytes == 96 * MIB
        with pytest.raises(PermanentError, match="shrinking"):
            hv.grow_volume(pool=lab.pool, name=blank.name, capacity_bytes=32 * MIB)

        uploaded = hv.upload_volume(pool=lab.pool, name=f"{prefix}-seed.iso", data=payload)
        assert uploaded.capacity_bytes == len(payload)
        with open(uploaded.path, "rb") as fh:
            assert fh.read() == payload
        with pytest.raises(StateConflictError):
            hv.upload_volume(pool=lab.pool, name=f"{prefix}-seed.iso", data=b"again")
    finally:
        for vol in hv.list_volumes(lab.pool):
            if vol.name.startswith(prefix):
                hv.delete_volume(lab.pool, vol.name)
    assert not [v for v in hv.list_volumes(lab.pool) if v.name.startswith(prefix)]


def test_a_streamed_volume_lands_in_the_pool_by_either_path(
    hv: LibvirtHypervisor, lab: LabInfo
) -> None:
    """The lab's pool folder is shared with libvirtd, so the driver writes files there; a pool it
    may not write to goes through libvirt's upload stream. Both give the same volume."""
    data = bytes(range(256)) * 4096 * 3  # 3 MiB in uneven chunks
    chunks = [data[i : i + 700_000] for i in range(0, len(data), 700_000)]
    for via_libvirt in (False, True):
        name = f"stream-{uuid.uuid4().hex[:8]}.raw"
        if via_libvirt:
            hv._local_dirs[lab.pool] = None  # as for a pool libvirt keeps out of our reach
        info = hv.upload_stream(pool=lab.pool, name=name, size=len(data), chunks=iter(chunks))
        try:
            assert hv._local_dirs[lab.pool] == (None if via_libvirt else lab.dir / "pool")
            assert info.capacity_bytes == len(data)
            with open(info.path, "rb") as stored:
                assert stored.read() == data
        finally:
            hv.delete_volume(lab.pool, name)
    assert not [v.name for v in hv.list_volumes(lab.pool) if "probe" in v.name]
    assert not list((lab.dir / "pool").glob("vmapi-upload-*"))

    hv._local_dirs.pop(lab.pool)
    with pytest.raises(PermanentError):
        hv.upload_stream(pool=lab.pool, name="short.raw", size=len(data) + 1, chunks=iter(chunks))
    assert hv.find_volume(lab.pool, "short.raw") is None
    assert not [p for p in (lab.dir / "pool").iterdir() if "short.raw" in p.name]


def test_a_streamed_upload_holds_neither_the_pool_nor_a_call_slot_while_bytes_arrive(
    hv: LibvirtHypervisor, lab: LabInfo
) -> None:
    """A download through libvirt's stream can last hours; meanwhile other machines' volumes in
    the same pool must still be made and removed."""
    hv._local_dirs[lab.pool] = None  # the libvirt stream path
    name = f"slow-{uuid.uuid4().hex[:8]}.raw"
    other = f"meanwhile-{uuid.uuid4().hex[:8]}.qcow2"
    first_sent, release = threading.Event(), threading.Event()

    def trickle() -> Iterator[bytes]:
        yield b"\0" * MIB
        first_sent.set()
        release.wait(60)
        yield b"\0" * MIB

    uploaded: list[object] = []
    upload = threading.Thread(
        target=lambda: uploaded.append(
            hv.upload_stream(pool=lab.pool, name=name, size=2 * MIB, chunks=trickle())
        )
    )
    upload.start()
    try:
        assert first_sent.wait(30), "the upload started"
        done = threading.Event()
        threading.Thread(
            target=lambda: (
                hv.create_blank(pool=lab.pool, name=other, capacity_bytes=MIB, format="qcow2"),
                hv.delete_volume(lab.pool, other),
                done.set(),
            )
        ).start()
        eventually(done.is_set, timeout=15, what="another volume made and removed meanwhile")
    finally:
        release.set()
        upload.join(60)
    try:
        assert uploaded, "the upload finished"
        assert hv.find_volume(lab.pool, name) is not None
    finally:
        hv.delete_volume(lab.pool, name)
        hv._local_dirs.pop(lab.pool, None)
