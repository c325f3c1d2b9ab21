"""One contract for the `Hypervisor` interface, run against the double and against libvirt.

Every unit test of controller logic runs on `tests.doubles.hypervisor.FakeHypervisor`, so what the
double does is what those tests prove the controller copes with. Matching the real adapter's
signatures is not enough: a double that lets a domain be started twice, keeps a removed volume
findable or raises another error class than libvirt makes those tests pass where production fails.
This suite asks both the same questions: the double, and `LibvirtHypervisor` on libvirt's
in-process test driver (a fresh host per test, see `hypervisor_subjects`). A difference fails here.

What the test driver cannot do is said where it matters: such a case runs only against the double
(`DOUBLE_ONLY`), with the reason, or only against libvirt (`LIBVIRT_ONLY`) when it checks how the
adapter copes with a refusal. Where the test driver answers a refusal with another error class than
qemu (the production driver), the subject's `wrong_state_error` names the class each reports.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest
from lxml import etree
from lxml.builder import E

from libvirt_provider.constants import METADATA_NAMESPACE, METADATA_PREFIX
from libvirt_provider.driver.base import Hypervisor
from libvirt_provider.driver.types import (
    AddressSource,
    DomainRef,
    DomainState,
    OverlaySpec,
)
from libvirt_provider.errors import (
    ForeignDomainError,
    NotFoundError,
    PermanentError,
    StateConflictError,
    UnsupportedError,
)
from tests.doubles import hypervisor as double
from tests.support.waiting import eventually
from tests.unit.driver.hypervisor_subjects import (
    NETWORK,
    OTHER_POOL,
    POOL,
    DoubleSubject,
    LibvirtSubject,
    Subject,
)

UUID = "6f1d3c2a-8b4e-4d7a-9c1b-2e3f4a5b6c7d"
OTHER_UUID = "0b9e2f4c-1111-4c4c-8888-222233334444"
NAME = "contract-vm"
GiB = 2**30
MACHINE = f"{{{METADATA_NAMESPACE}}}machine"
TAG = f"{{{METADATA_NAMESPACE}}}tag"

DOUBLE_ONLY = pytest.mark.parametrize("subject", ["double"], indirect=True)
LIBVIRT_ONLY = pytest.mark.parametrize("subject", ["libvirt"], indirect=True)


@pytest.fixture(params=["double", "libvirt"])
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Subject]:
    made: Subject = DoubleSubject() if request.param == "double" else LibvirtSubject(tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def hv(subject: Subject) -> Hypervisor:
    return subject.hv


def domain_xml(
    *,
    name: str = NAME,
    uuid: str | None = UUID,
    memory_kib: int = 262144,
    vcpus: int = 2,
    disks: tuple[etree._Element, ...] = (),
    metadata: tuple[etree._Element, ...] = (),
) -> str:
    """A domain both implementations accept (type `test`, the test driver's only one)."""
    parts = [E.name(name)]
    if uuid is not None:
        parts.append(E.uuid(uuid))
    if metadata:
        parts.append(E.metadata(*metadata))
    parts += [
        E.memory(str(memory_kib), unit="KiB"),
        E.currentMemory(str(memory_kib), unit="KiB"),
        E.vcpu(str(vcpus), current="1"),
        E.os(E.type("hvm", arch="x86_64")),
        E.devices(*disks),
    ]
    return str(etree.tostring(E.domain(*parts, type="test"), encoding="unicode"))


def volume_disk(pool: str, volume: str, target: str) -> etree._Element:
    return E.disk(  # type: ignore[no-any-return]
        E.source(pool=pool, volume=volume),
        E.target(dev=target, bus="virtio"),
        type="volume",
        device="disk",
    )


def file_disk(path: str, target: str) -> etree._Element:
    return E.disk(  # type: ignore[no-any-return]
        E.source(file=path), E.target(dev=target, bus="virtio"), type="file", device="disk"
    )


def defined(hv: Hypervisor, **kwargs: Any) -> DomainRef:
    """Define `domain_xml(**kwargs)`."""
    return hv.define(domain_xml(**kwargs))


def running(hv: Hypervisor) -> str:
    ref = defined(hv)
    hv.start(ref.uuid)
    return ref.uuid


def state(hv: Hypervisor, uuid: str) -> DomainState:
    return hv.status(uuid).state


def parsed(xml: str) -> etree._Element:
    return etree.fromstring(xml.encode())


def online_vcpus(xml: str) -> int:
    vcpu = parsed(xml).find("vcpu")
    assert vcpu is not None
    return int(vcpu.get("current") or vcpu.text or 0)


def test_the_doubles_reason_codes_are_libvirts() -> None:
    assert (
        double.SHUTOFF_UNKNOWN,
        double.SHUTOFF_SHUTDOWN,
        double.SHUTOFF_DESTROYED,
        double.SHUTOFF_SAVED,
        double.RUNNING_BOOTED,
        double.RUNNING_RESTORED,
        double.RUNNING_UNPAUSED,
        double.PAUSED_USER,
    ) == (
        libvirt.VIR_DOMAIN_SHUTOFF_UNKNOWN,
        libvirt.VIR_DOMAIN_SHUTOFF_SHUTDOWN,
        libvirt.VIR_DOMAIN_SHUTOFF_DESTROYED,
        libvirt.VIR_DOMAIN_SHUTOFF_SAVED,
        libvirt.VIR_DOMAIN_RUNNING_BOOTED,
        libvirt.VIR_DOMAIN_RUNNING_RESTORED,
        libvirt.VIR_DOMAIN_RUNNING_UNPAUSED,
        libvirt.VIR_DOMAIN_PAUSED_USER,
    )


# -- lookups -------------------------------------------------------------------------------------


def test_lookup_finds_a_domain_by_its_uuid(hv: Hypervisor) -> None:
    ref = defined(hv)
    assert ref == DomainRef(uuid=UUID, name=NAME)
    assert hv.lookup(uuid=UUID, name=NAME) == ref
    # The UUID decides: a renamed machine still finds its domain.
    assert hv.lookup(uuid=UUID, name="another-name") == ref


def test_lookup_of_an_unknown_domain_is_none(hv: Hypervisor) -> None:
    assert hv.lookup(uuid=UUID, name=NAME) is None
    defined(hv, name="someone-else", uuid=OTHER_UUID)
    assert hv.lookup(uuid=UUID, name=NAME) is None


def test_lookup_of_a_name_held_under_another_uuid_is_a_foreign_domain(hv: Hypervisor) -> None:
    defined(hv, uuid=OTHER_UUID)
    with pytest.raises(ForeignDomainError) as err:
        hv.lookup(uuid=UUID, name=NAME)
    assert err.value.foreign_uuid == OTHER_UUID
    assert err.value.name == NAME


# -- define --------------------------------------------------------------------------------------


def test_a_defined_domain_is_shut_off_with_no_saved_state(hv: Hypervisor) -> None:
    defined(hv)
    status = hv.status(UUID)
    assert status.state is DomainState.SHUTOFF
    assert status.reason == libvirt.VIR_DOMAIN_SHUTOFF_UNKNOWN
    assert not status.has_managed_save
    assert not status.paused_by_io_error


def test_define_without_a_uuid_gets_one(hv: Hypervisor) -> None:
    ref = defined(hv, uuid=None)
    assert str(uuidlib.UUID(ref.uuid)) == ref.uuid
    assert hv.lookup(uuid=ref.uuid, name=NAME) == ref


def test_define_spells_the_uuid_as_libvirt_does(hv: Hypervisor) -> None:
    ref = defined(hv, uuid=UUID.upper())
    assert ref.uuid == UUID
    assert hv.lookup(uuid=UUID, name=NAME) == ref


def test_defining_again_replaces_the_definition(hv: Hypervisor) -> None:
    defined(hv, memory_kib=262144)
    assert defined(hv, memory_kib=524288) == DomainRef(uuid=UUID, name=NAME)
    assert parsed(hv.domain_xml(UUID)).findtext("memory") == "524288"
    assert parsed(hv.domain_xml(UUID, inactive=True)).findtext("memory") == "524288"


def test_defining_a_taken_name_under_another_uuid_is_refused(hv: Hypervisor) -> None:
    defined(hv, uuid=OTHER_UUID, memory_kib=262144)
    # libvirt reports the clash as a failed operation, which is no state conflict to wait out.
    with pytest.raises(PermanentError):
        defined(hv, uuid=UUID, memory_kib=524288)
    assert hv.lookup(uuid=OTHER_UUID, name=NAME) == DomainRef(uuid=OTHER_UUID, name=NAME)
    assert parsed(hv.domain_xml(OTHER_UUID)).findtext("memory") == "262144"
    with pytest.raises(NotFoundError):
        hv.status(UUID)


def test_renaming_a_domain_by_defining_its_uuid_under_another_name_is_refused(
    hv: Hypervisor,
) -> None:
    defined(hv)
    with pytest.raises(PermanentError):
        defined(hv, name="renamed")
    assert hv.lookup(uuid=UUID, name="renamed") == DomainRef(uuid=UUID, name=NAME)


@pytest.mark.parametrize(
    "xml",
    [
        pytest.param("<domain type='test'><name>cut", id="not-xml"),
        pytest.param(domain_xml().replace(f"<name>{NAME}</name>", ""), id="no-name"),
        pytest.param(domain_xml().replace(UUID, "not-a-uuid"), id="bad-uuid"),
    ],
)
def test_define_refuses_a_definition_it_cannot_read(hv: Hypervisor, xml: str) -> None:
    with pytest.raises(PermanentError):
        hv.define(xml)


# -- power ---------------------------------------------------------------------------------------


def test_start_runs_a_shut_off_domain(hv: Hypervisor) -> None:
    uuid = running(hv)
    status = hv.status(uuid)
    assert status.state is DomainState.RUNNING
    assert status.reason == libvirt.VIR_DOMAIN_RUNNING_BOOTED


def test_starting_a_running_domain_is_refused(subject: Subject, hv: Hypervisor) -> None:
    uuid = running(hv)
    with pytest.raises(subject.wrong_state_error):
        hv.start(uuid)
    assert state(hv, uuid) is DomainState.RUNNING


def test_shutdown_powers_off_a_guest_that_answers(hv: Hypervisor) -> None:
    uuid = running(hv)
    hv.shutdown(uuid)
    # The test driver's guests, like the double's by default, answer at once.
    status = hv.status(uuid)
    assert status.state is DomainState.SHUTOFF
    assert status.reason == libvirt.VIR_DOMAIN_SHUTOFF_SHUTDOWN


def test_shutdown_of_a_shut_off_domain_is_refused(subject: Subject, hv: Hypervisor) -> None:
    uuid = defined(hv).uuid
    with pytest.raises(subject.wrong_state_error):
        hv.shutdown(uuid)
    assert state(hv, uuid) is DomainState.SHUTOFF


@pytest.mark.parametrize("paused", [False, True], ids=["running", "paused"])
def test_destroy_powers_off_at_once(subject: Subject, hv: Hypervisor, paused: bool) -> None:
    uuid = running(hv)
    if paused:
        subject.pause(uuid)
    hv.destroy(uuid)
    status = hv.status(uuid)
    assert status.state is DomainState.SHUTOFF
    assert status.reason == libvirt.VIR_DOMAIN_SHUTOFF_DESTROYED
    assert not status.has_managed_save


def test_destroying_a_shut_off_domain_is_a_state_conflict(hv: Hypervisor) -> None:
    uuid = defined(hv).uuid
    with pytest.raises(StateConflictError):
        hv.destroy(uuid)


def test_resume_runs_a_paused_domain_again(subject: Subject, hv: Hypervisor) -> None:
    uuid = running(hv)
    subject.pause(uuid)
    status = hv.status(uuid)
    assert status.state is DomainState.PAUSED
    assert status.reason == libvirt.VIR_DOMAIN_PAUSED_USER
    assert not status.paused_by_io_error
    hv.resume(uuid)
    status = hv.status(uuid)
    assert status.state is DomainState.RUNNING
    assert status.reason == libvirt.VIR_DOMAIN_RUNNING_UNPAUSED


def test_resuming_a_shut_off_domain_is_refused(subject: Subject, hv: Hypervisor) -> None:
    uuid = defined(hv).uuid
    with pytest.raises(subject.wrong_state_error):
        hv.resume(uuid)
    assert state(hv, uuid) is DomainState.SHUTOFF


# -- managed save --------------------------------------------------------------------------------


@pytest.mark.parametrize("paused", [False, True], ids=["running", "paused"])
def test_managed_save_stops_the_domain_and_keeps_its_memory(
    subject: Subject, hv: Hypervisor, paused: bool
) -> None:
    uuid = running(hv)
    if paused:
        subject.pause(uuid)
    hv.managed_save(uuid)
    status = hv.status(uuid)
    assert status.state is DomainState.SHUTOFF
    assert status.reason == libvirt.VIR_DOMAIN_SHUTOFF_SAVED
    assert status.has_managed_save


def test_start_resumes_from_the_saved_state_and_uses_it_up(hv: Hypervisor) -> None:
    uuid = running(hv)
    hv.managed_save(uuid)
    hv.start(uuid)
    status = hv.status(uuid)
    # No reason asserted: qemu says RESTORED (the double too), the test driver says BOOTED.
    assert status.state is DomainState.RUNNING
    assert not status.has_managed_save


def test_discarding_the_saved_state_leaves_a_cold_boot(hv: Hypervisor) -> None:
    uuid = running(hv)
    hv.managed_save(uuid)
    hv.discard_saved_state(uuid)
    assert not hv.status(uuid).has_managed_save
    hv.discard_saved_state(uuid)  # nothing to discard: not an error
    hv.start(uuid)
    status = hv.status(uuid)
    assert status.state is DomainState.RUNNING
    assert status.reason == libvirt.VIR_DOMAIN_RUNNING_BOOTED


def test_managed_save_of_a_shut_off_domain_is_a_state_conflict(hv: Hypervisor) -> None:
    uuid = defined(hv).uuid
    with pytest.raises(StateConflictError):
        hv.managed_save(uuid)
    assert not hv.status(uuid).has_managed_save


# -- undefine ------------------------------------------------------------------------------------


def test_undefine_removes_a_shut_off_domain(hv: Hypervisor) -> None:
    uuid = defined(hv).uuid
    hv.undefine(uuid)
    assert hv.lookup(uuid=uuid, name=NAME) is None
    with pytest.raises(NotFoundError):
        hv.status(uuid)


def test_undefine_removes_a_saved_domain_with_its_saved_state(hv: Hypervisor) -> None:
    uuid = running(hv)
    hv.managed_save(uuid)
    hv.undefine(uuid)
    assert hv.lookup(uuid=uuid, name=NAME) is None
    # The name is free again, and a new domain under it starts cold.
    defined(hv)
    assert not hv.status(uuid).has_managed_save


def test_an_undefined_running_domain_runs_on_until_it_stops(hv: Hypervisor) -> None:
    uuid = running(hv)
    hv.undefine(uuid)
    assert hv.lookup(uuid=uuid, name=NAME) == DomainRef(uuid=uuid, name=NAME)
    assert state(hv, uuid) is DomainState.RUNNING
    # Transient now: there is no definition left to save into.
    with pytest.raises(StateConflictError):
        hv.managed_save(uuid)
    hv.destroy(uuid)
    assert hv.lookup(uuid=uuid, name=NAME) is None
    with pytest.raises(NotFoundError):
        hv.status(uuid)


def test_defining_an_undefined_running_domain_again_keeps_it(hv: Hypervisor) -> None:
    uuid = running(hv)
    hv.undefine(uuid)
    defined(hv)
    hv.destroy(uuid)
    assert state(hv, uuid) is DomainState.SHUTOFF


_ON_A_DOMAIN: dict[str, Callable[[Hypervisor, str], object]] = {
    "start": lambda hv, u: hv.start(u),
    "shutdown": lambda hv, u: hv.shutdown(u),
    "destroy": lambda hv, u: hv.destroy(u),
    "managed_save": lambda hv, u: hv.managed_save(u),
    "discard_saved_state": lambda hv, u: hv.discard_saved_state(u),
    "resume": lambda hv, u: hv.resume(u),
    "undefine": lambda hv, u: hv.undefine(u),
    "status": lambda hv, u: hv.status(u),
    "domain_xml": lambda hv, u: hv.domain_xml(u),
    "domain_xml_inactive": lambda hv, u: hv.domain_xml(u, inactive=True),
    "disk_sources": lambda hv, u: hv.disk_sources(u),
    "set_autostart": lambda hv, u: hv.set_autostart(u, True),
    "addresses": lambda hv, u: hv.addresses(u, AddressSource.LEASE),
    "guest_info": lambda hv, u: hv.guest_info(u),
    "set_vcpus": lambda hv, u: hv.set_vcpus(u, 1),
    "set_metadata": lambda hv, u: hv.set_metadata(u, "<machine/>"),
}


@pytest.mark.parametrize("call", sorted(_ON_A_DOMAIN))
def test_a_missing_domain_is_not_found(hv: Hypervisor, call: str) -> None:
    defined(hv, name="someone-else", uuid=OTHER_UUID)
    with pytest.raises(NotFoundError):
        _ON_A_DOMAIN[call](hv, UUID)


# -- definitions ---------------------------------------------------------------------------------


def test_domain_xml_describes_the_domain(hv: Hypervisor) -> None:
    defined(hv, disks=(file_disk("/images/root.img", "vda"),))
    root = parsed(hv.domain_xml(UUID))
    assert root.findtext("name") == NAME
    assert root.findtext("uuid") == UUID
    assert root.findtext("memory") == "262144"
    assert [t.get("dev") for t in root.iterfind("devices/disk/target")] == ["vda"]


def test_a_running_domain_keeps_its_live_definition_until_it_starts_again(
    hv: Hypervisor,
) -> None:
    uuid = running(hv)
    defined(hv, memory_kib=524288)
    assert parsed(hv.domain_xml(uuid)).findtext("memory") == "262144"
    assert parsed(hv.domain_xml(uuid, inactive=True)).findtext("memory") == "524288"
    hv.destroy(uuid)
    assert parsed(hv.domain_xml(uuid)).findtext("memory") == "524288"
    hv.start(uuid)
    assert parsed(hv.domain_xml(uuid)).findtext("memory") == "524288"


def test_set_autostart_is_kept(subject: Subject, hv: Hypervisor) -> None:
    uuid = defined(hv).uuid
    assert not subject.autostart(uuid)
    hv.set_autostart(uuid, True)
    assert subject.autostart(uuid)
    hv.set_autostart(uuid, True)  # already so: nothing changes
    assert subject.autostart(uuid)
    hv.set_autostart(uuid, False)
    assert not subject.autostart(uuid)


def test_disk_sources_resolve_pool_volumes_to_their_paths(hv: Hypervisor) -> None:
    root = hv.create_blank(pool=POOL, name="root.qcow2", capacity_bytes=GiB, format="qcow2")
    disks = (volume_disk(POOL, "root.qcow2", "vda"), file_disk("/images/data.img", "vdb"))
    uuid = defined(hv, disks=disks).uuid
    assert hv.disk_sources(uuid) == [root.path, "/images/data.img"]


def test_disk_sources_of_a_missing_volume_are_not_found(hv: Hypervisor) -> None:
    uuid = defined(hv, disks=(volume_disk(POOL, "gone.qcow2", "vda"),)).uuid
    with pytest.raises(NotFoundError):
        hv.disk_sources(uuid)


def test_addresses_of_a_shut_off_domain_are_a_state_conflict(hv: Hypervisor) -> None:
    uuid = defined(hv).uuid
    for source in AddressSource:
        with pytest.raises(StateConflictError):
            hv.addresses(uuid, source)


def test_a_domain_without_an_agent_channel_has_no_guest_info(hv: Hypervisor) -> None:
    uuid = defined(hv).uuid
    assert hv.guest_info(uuid) is None
    hv.start(uuid)
    assert hv.guest_info(uuid) is None


# -- live changes --------------------------------------------------------------------------------


def test_set_vcpus_changes_the_running_and_the_persistent_definition(hv: Hypervisor) -> None:
    uuid = running(hv)
    hv.set_vcpus(uuid, 2)
    assert online_vcpus(hv.domain_xml(uuid)) == 2
    assert online_vcpus(hv.domain_xml(uuid, inactive=True)) == 2


def test_set_vcpus_beyond_the_slots_is_refused(hv: Hypervisor) -> None:
    uuid = running(hv)
    with pytest.raises(PermanentError):
        hv.set_vcpus(uuid, 3)
    assert online_vcpus(hv.domain_xml(uuid)) == 1


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda hv, u: hv.set_vcpus(u, 2), id="set_vcpus"),
        pytest.param(lambda hv, u: hv.set_metadata(u, "<machine/>"), id="set_metadata"),
    ],
)
def test_live_changes_of_a_shut_off_domain_are_a_state_conflict(
    hv: Hypervisor, change: Callable[[Hypervisor, str], None]
) -> None:
    uuid = defined(hv).uuid
    with pytest.raises(StateConflictError):
        change(hv, uuid)


def marker(name: str, tag: str) -> etree._Element:
    """An ownership marker as the domain XML renders it: prefixed, with a child element."""
    machine = etree.Element(MACHINE, nsmap={METADATA_PREFIX: METADATA_NAMESPACE}, name=name)
    etree.SubElement(machine, TAG, key="team", value=tag)
    return machine


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda hv, u: hv.set_vcpus(u, 2), id="set_vcpus"),
        pytest.param(lambda hv, u: hv.set_metadata(u, "<machine/>"), id="set_metadata"),
    ],
)
def test_live_changes_of_an_undefined_running_domain_are_a_state_conflict(
    hv: Hypervisor, change: Callable[[Hypervisor, str], None]
) -> None:
    uuid = running(hv)
    hv.undefine(uuid)
    # Each change is made to the persistent definition too, and a transient domain has none.
    with pytest.raises(StateConflictError):
        change(hv, uuid)
    assert online_vcpus(hv.domain_xml(uuid)) == 1


def test_set_metadata_replaces_only_this_providers_element(hv: Hypervisor) -> None:
    theirs = etree.Element("{urn:other-tool}note", nsmap={"other": "urn:other-tool"})
    uuid = defined(hv, metadata=(marker("old", "a"), theirs)).uuid
    hv.start(uuid)
    # The very form the live update sends (`domainxml.live_update`): the marker as rendered.
    hv.set_metadata(uuid, etree.tostring(marker("new", "b"), encoding="unicode"))
    for inactive in (False, True):
        metadata = parsed(hv.domain_xml(uuid, inactive=inactive)).find("metadata")
        assert metadata is not None
        machines = metadata.findall(MACHINE)
        assert [m.get("name") for m in machines] == ["new"]
        assert [t.get("value") for t in machines[0].iterfind(TAG)] == ["b"]
        assert metadata.find("{urn:other-tool}note") is not None


# -- volumes -------------------------------------------------------------------------------------


def test_host_facts_name_the_pools_and_networks(hv: Hypervisor) -> None:
    facts = hv.host_facts()
    assert facts.pools == frozenset({POOL, OTHER_POOL})
    assert facts.networks == frozenset({NETWORK})
    assert facts.domain_types
    assert facts.hostname
    assert facts.arch


@pytest.mark.parametrize("fmt", ["qcow2", "raw"])
def test_create_blank_makes_an_empty_volume(hv: Hypervisor, fmt: str) -> None:
    vol = hv.create_blank(pool=POOL, name=f"data.{fmt}", capacity_bytes=GiB, format=fmt)
    assert (vol.pool, vol.name, vol.capacity_bytes, vol.allocation_bytes) == (
        POOL,
        f"data.{fmt}",
        GiB,
        0,
    )
    assert vol.format == fmt
    assert vol.backing_path is None
    assert vol.path.endswith(f"/data.{fmt}")
    assert hv.find_volume(POOL, f"data.{fmt}") == vol
    assert hv.list_volumes(POOL) == [vol]
    assert hv.volume_names(POOL) == [f"data.{fmt}"]


def test_create_overlay_makes_a_qcow2_volume_over_its_base(hv: Hypervisor) -> None:
    base = hv.create_blank(pool=OTHER_POOL, name="base.qcow2", capacity_bytes=GiB, format="qcow2")
    spec = OverlaySpec(
        pool=POOL,
        name="boot.qcow2",
        backing_path=base.path,
        backing_format="qcow2",
        capacity_bytes=4 * GiB,
    )
    vol = hv.create_overlay(spec)
    assert (vol.pool, vol.name, vol.format, vol.backing_path) == (
        POOL,
        "boot.qcow2",
        "qcow2",
        base.path,
    )
    assert vol.capacity_bytes == 4 * GiB
    # What an overlay allocates is the pool's business (a few KiB with qemu, its capacity on the
    # test driver); only the bounds are the interface's.
    assert 0 <= vol.allocation_bytes <= vol.capacity_bytes
    assert hv.find_volume(POOL, "boot.qcow2") == vol


def test_volumes_are_kept_per_pool(hv: Hypervisor) -> None:
    one = hv.create_blank(pool=POOL, name="same.raw", capacity_bytes=GiB, format="raw")
    two = hv.create_blank(pool=OTHER_POOL, name="same.raw", capacity_bytes=2 * GiB, format="raw")
    assert one.path != two.path
    hv.delete_volume(POOL, "same.raw")
    assert hv.find_volume(POOL, "same.raw") is None
    assert hv.find_volume(OTHER_POOL, "same.raw") == two
    assert hv.volume_names(POOL) == []


_CREATE_TAKEN: dict[str, Callable[[Hypervisor], object]] = {
    "blank": lambda hv: hv.create_blank(
        pool=POOL, name="taken.qcow2", capacity_bytes=2 * GiB, format="qcow2"
    ),
    "overlay": lambda hv: hv.create_overlay(
        OverlaySpec(POOL, "taken.qcow2", "/images/base.qcow2", "qcow2", 2 * GiB)
    ),
}


@pytest.mark.parametrize("kind", sorted(_CREATE_TAKEN))
def test_creating_a_volume_that_exists_is_refused(
    subject: Subject, hv: Hypervisor, kind: str
) -> None:
    first = hv.create_blank(pool=POOL, name="taken.qcow2", capacity_bytes=GiB, format="qcow2")
    with pytest.raises(subject.volume_exists_error):
        _CREATE_TAKEN[kind](hv)
    assert hv.find_volume(POOL, "taken.qcow2") == first


def test_a_missing_volume_is_none_when_looked_for(hv: Hypervisor) -> None:
    assert hv.find_volume(POOL, "nothing.qcow2") is None
    assert hv.list_volumes(POOL) == []
    assert hv.volume_names(POOL) == []


def test_a_deleted_volume_is_gone(hv: Hypervisor) -> None:
    hv.create_blank(pool=POOL, name="old.raw", capacity_bytes=GiB, format="raw")
    hv.delete_volume(POOL, "old.raw")
    assert hv.find_volume(POOL, "old.raw") is None
    assert hv.list_volumes(POOL) == []


def test_deleting_a_missing_volume_is_not_found(hv: Hypervisor) -> None:
    with pytest.raises(NotFoundError):
        hv.delete_volume(POOL, "nothing.raw")


def test_growing_a_volume_to_its_size_changes_nothing(hv: Hypervisor) -> None:
    vol = hv.create_blank(pool=POOL, name="disk.qcow2", capacity_bytes=GiB, format="qcow2")
    assert hv.grow_volume(pool=POOL, name="disk.qcow2", capacity_bytes=GiB) == vol


def test_shrinking_a_volume_is_refused(hv: Hypervisor) -> None:
    vol = hv.create_blank(pool=POOL, name="disk.qcow2", capacity_bytes=GiB, format="qcow2")
    with pytest.raises(PermanentError):
        hv.grow_volume(pool=POOL, name="disk.qcow2", capacity_bytes=GiB // 2)
    assert hv.find_volume(POOL, "disk.qcow2") == vol


def test_growing_a_missing_volume_is_not_found(hv: Hypervisor) -> None:
    with pytest.raises(NotFoundError):
        hv.grow_volume(pool=POOL, name="nothing.qcow2", capacity_bytes=GiB)


@DOUBLE_ONLY  # libvirt's test driver has no virStorageVolResize
def test_grow_volume_grows_it(hv: Hypervisor) -> None:
    hv.create_blank(pool=POOL, name="disk.qcow2", capacity_bytes=GiB, format="qcow2")
    grown = hv.grow_volume(pool=POOL, name="disk.qcow2", capacity_bytes=2 * GiB)
    assert grown.capacity_bytes == 2 * GiB
    assert hv.find_volume(POOL, "disk.qcow2") == grown


def test_pool_available_counts_what_volumes_allocate(hv: Hypervisor) -> None:
    before = hv.pool_available(POOL)
    assert before is not None
    assert before > 0
    spec = OverlaySpec(POOL, "boot.qcow2", "/images/base.qcow2", "qcow2", 4 * GiB)
    vol = hv.create_overlay(spec)
    assert hv.pool_available(POOL) == before - vol.allocation_bytes
    hv.delete_volume(POOL, "boot.qcow2")
    assert hv.pool_available(POOL) == before


_ON_A_POOL: dict[str, Callable[[Hypervisor], object]] = {
    "find_volume": lambda hv: hv.find_volume("nowhere", "x.raw"),
    "list_volumes": lambda hv: hv.list_volumes("nowhere"),
    "volume_names": lambda hv: hv.volume_names("nowhere"),
    "pool_available": lambda hv: hv.pool_available("nowhere"),
    "create_blank": lambda hv: hv.create_blank(
        pool="nowhere", name="x.raw", capacity_bytes=GiB, format="raw"
    ),
    "create_overlay": lambda hv: hv.create_overlay(
        OverlaySpec("nowhere", "x.qcow2", "/images/base.qcow2", "qcow2", GiB)
    ),
    "upload_volume": lambda hv: hv.upload_volume(pool="nowhere", name="x.iso", data=b"x"),
    "grow_volume": lambda hv: hv.grow_volume(pool="nowhere", name="x.raw", capacity_bytes=GiB),
    "delete_volume": lambda hv: hv.delete_volume("nowhere", "x.raw"),
}


@pytest.mark.parametrize("call", sorted(_ON_A_POOL))
def test_a_missing_pool_is_not_found(hv: Hypervisor, call: str) -> None:
    with pytest.raises(NotFoundError):
        _ON_A_POOL[call](hv)


# -- uploads: libvirt's test driver has no virStorageVolUpload -----------------------------------


@DOUBLE_ONLY
def test_upload_volume_makes_a_raw_volume_of_the_data(hv: Hypervisor) -> None:
    vol = hv.upload_volume(pool=POOL, name="cidata.iso", data=b"x" * 1000)
    assert (vol.format, vol.capacity_bytes) == ("raw", 1000)
    assert hv.find_volume(POOL, "cidata.iso") == vol
    with pytest.raises(StateConflictError):
        hv.upload_volume(pool=POOL, name="cidata.iso", data=b"y")


@DOUBLE_ONLY
def test_upload_stream_makes_a_volume_of_the_chunks(hv: Hypervisor) -> None:
    vol = hv.upload_stream(pool=POOL, name="image.raw", size=6, chunks=iter([b"abc", b"def"]))
    assert vol.capacity_bytes == 6
    assert hv.find_volume(POOL, "image.raw") == vol


@DOUBLE_ONLY
def test_an_upload_stream_that_falls_short_leaves_no_volume(hv: Hypervisor) -> None:
    with pytest.raises(PermanentError):
        hv.upload_stream(pool=POOL, name="image.raw", size=6, chunks=iter([b"abc"]))
    assert hv.find_volume(POOL, "image.raw") is None


@LIBVIRT_ONLY
def test_an_upload_the_driver_refuses_leaves_no_volume(hv: Hypervisor) -> None:
    with pytest.raises(UnsupportedError):
        hv.upload_volume(pool=POOL, name="cidata.iso", data=b"x" * 1000)
    with pytest.raises(UnsupportedError):
        hv.upload_stream(pool=POOL, name="image.raw", size=3, chunks=iter([b"abc"]))
    assert hv.volume_names(POOL) == []


# -- lifecycle events ----------------------------------------------------------------------------


def test_lifecycle_listeners_hear_of_every_change_of_a_domain(
    subject: Subject, hv: Hypervisor
) -> None:
    heard: list[str] = []
    hv.add_lifecycle_listener(heard.append)

    def heard_after(change: Callable[[], object]) -> None:
        before = len(heard)
        change()
        # libvirt delivers its events on its event loop's thread; the double, at once.
        eventually(lambda: len(heard) > before, timeout=5, interval=0.01, what="an event")
        assert set(heard[before:]) == {UUID}

    heard_after(lambda: defined(hv))
    heard_after(lambda: hv.start(UUID))
    heard_after(lambda: subject.pause(UUID))
    heard_after(lambda: hv.resume(UUID))
    heard_after(lambda: hv.managed_save(UUID))
    heard_after(lambda: hv.start(UUID))
    heard_after(lambda: hv.shutdown(UUID))
    heard_after(lambda: hv.start(UUID))
    heard_after(lambda: hv.destroy(UUID))
    heard_after(lambda: hv.undefine(UUID))


# -- DHCP reservations (public addresses) ---------------------------------------------------------


class TestDhcpReservations:
    MAC = "52:54:00:aa:00:01"
    OTHER_MAC = "52:54:00:aa:00:02"

    def test_a_networks_dhcp_is_its_ranges_and_subnets(self, hv: Hypervisor) -> None:
        dhcp = hv.network_dhcp(NETWORK)
        assert dhcp is not None
        assert dhcp.ranges == (("192.168.122.2", "192.168.122.254"),)
        assert dhcp.subnets == ("192.168.122.0/24",)
        assert dict(dhcp.hosts) == {}
        assert hv.network_dhcp("no-such-network") is None

    def test_a_reservation_is_added_once_and_released(self, hv: Hypervisor) -> None:
        hv.reserve_address(NETWORK, mac=self.MAC, address="192.168.122.1")
        hv.reserve_address(NETWORK, mac=self.MAC, address="192.168.122.1")
        dhcp = hv.network_dhcp(NETWORK)
        assert dhcp is not None
        assert dict(dhcp.hosts) == {self.MAC: "192.168.122.1"}
        hv.release_reservation(NETWORK, mac=self.MAC, address="192.168.122.1")
        hv.release_reservation(NETWORK, mac=self.MAC, address="192.168.122.1")
        hv.release_reservation("no-such-network", mac=self.MAC, address="192.168.122.1")
        dhcp = hv.network_dhcp(NETWORK)
        assert dhcp is not None
        assert dict(dhcp.hosts) == {}

    def test_the_address_of_another_mac_and_another_address_of_the_mac_are_replaced(
        self, hv: Hypervisor
    ) -> None:
        hv.reserve_address(NETWORK, mac=self.OTHER_MAC, address="192.168.122.1")
        hv.reserve_address(NETWORK, mac=self.MAC, address="192.168.122.1")
        dhcp = hv.network_dhcp(NETWORK)
        assert dhcp is not None
        assert dict(dhcp.hosts) == {self.MAC: "192.168.122.1"}
        hv.reserve_address(NETWORK, mac=self.MAC.upper(), address="192.168.122.3")
        dhcp = hv.network_dhcp(NETWORK)
        assert dhcp is not None
        assert dict(dhcp.hosts) == {self.MAC: "192.168.122.3"}
