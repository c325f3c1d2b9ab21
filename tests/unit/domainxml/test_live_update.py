"""What a running domain takes at once, and what waits for the next power cycle."""

from __future__ import annotations

from lxml import etree

from catalog.image import DiskBus, ImageFormat
from libvirt_provider.domainxml import (
    AttachDevice,
    DetachDevice,
    DeviceAction,
    DeviceEdit,
    DeviceKind,
    SetMemory,
    SetMetadata,
    SetVcpus,
    plan_live_update,
    render_domain_xml,
)
from libvirt_provider.resolved import DomainDisk
from tests.unit.domainxml.cases import machine

NS = "https://infrastructure.vm-api.io/libvirt-machine/v1alpha1"


def _domain(
    *,
    vcpus: int = 1,
    slots: int = 4,
    memory: int = 256,
    nics: tuple[str, ...] = ("aa",),
    digest: str = "d1",
    tag: str = "a",
) -> str:
    interfaces = "".join(
        f"<interface type='network'><mac address='52:54:00:00:00:{n}'/>"
        "<source network='lab'/><model type='virtio'/></interface>"
        for n in nics
    )
    return (
        f"<domain type='qemu'><name>d</name><metadata><vmapi:machine xmlns:vmapi='{NS}' "
        "namespace='n' name='m' uid='u' virtualMachine='m'>"
        f"<vmapi:tag key='k' value='{tag}'/><vmapi:cloudInit digest='{digest}'/>"
        "</vmapi:machine></metadata>"
        f"<memory unit='MiB'>1024</memory><currentMemory unit='MiB'>{memory}</currentMemory>"
        f"<vcpu current='{vcpus}'>{slots}</vcpu><devices>{interfaces}</devices></domain>"
    )


def test_sizes_within_the_headroom_become_live_steps() -> None:
    plan = plan_live_update(_domain(), _domain(vcpus=3, memory=512))
    assert [step for _, step in plan.steps] == [SetVcpus(3), SetMemory(512 * 1024)]
    assert plan.deferred == ()


def test_fewer_vcpus_or_more_slots_are_deferred() -> None:
    assert not plan_live_update(_domain(vcpus=2), _domain(vcpus=1)).steps
    plan = plan_live_update(_domain(), _domain(slots=8))
    assert not plan.steps
    assert [c.what for c in plan.deferred] == ["vCPU slots"]


def test_nics_are_attached_and_detached_with_their_own_xml() -> None:
    plan = plan_live_update(_domain(nics=("aa", "bb")), _domain(nics=("aa", "cc")))
    steps = [step for _, step in plan.steps]
    assert [type(s) for s in steps] == [DetachDevice, AttachDevice]
    detached = etree.fromstring(steps[0].xml)  # type: ignore[union-attr]
    attached = etree.fromstring(steps[1].xml)  # type: ignore[union-attr]
    assert detached.find("mac").get("address") == "52:54:00:00:00:bb"  # type: ignore[union-attr]
    assert attached.find("mac").get("address") == "52:54:00:00:00:cc"  # type: ignore[union-attr]


def test_tags_change_live_unless_the_cloud_init_data_changes_too() -> None:
    plan = plan_live_update(_domain(), _domain(tag="b"))
    [(_change, step)] = plan.steps
    assert isinstance(step, SetMetadata)
    assert 'value="b"' in step.xml
    both = plan_live_update(_domain(), _domain(tag="b", digest="d2"))
    assert not both.steps
    assert sorted(c.what for c in both.deferred) == ["cloud-init data", "tags"]
    assert "d2" not in " ".join(str(c) for c in both.deferred)


def _with_data_disk(bus: DiskBus) -> tuple[str, str]:
    base = machine("hotplug-disk")
    data = DomainDisk(
        name="data",
        pool="p",
        volume="data.raw",
        format=ImageFormat.RAW,
        bus=bus,
        target="vdb" if bus is DiskBus.VIRTIO else "sdb",
        serial="data",
    )
    grown = base.model_copy(update={"disks": (*base.disks, data)})
    return render_domain_xml(base), render_domain_xml(grown)


def test_a_data_disk_is_attached_and_detached_as_the_documents_have_it() -> None:
    without, with_disk = _with_data_disk(DiskBus.VIRTIO)
    [(change, step)] = plan_live_update(without, with_disk).steps
    assert change.key == DeviceEdit(DeviceKind.DISK, "ua-disk-data", DeviceAction.ADDED)
    assert isinstance(step, AttachDevice)
    assert etree.fromstring(step.xml).find("alias").get("name") == "ua-disk-data"  # type: ignore[union-attr]
    [(change, step)] = plan_live_update(with_disk, without).steps
    assert str(change).startswith("disk ua-disk-data removed")
    assert isinstance(step, DetachDevice)
    assert etree.fromstring(step.xml).find("target").get("dev") == "vdb"  # type: ignore[union-attr]


def test_a_sata_data_disk_waits_for_the_power_cycle() -> None:
    without, with_disk = _with_data_disk(DiskBus.SATA)
    plan = plan_live_update(without, with_disk)
    assert not plan.steps
    assert [c.what for c in plan.deferred] == ["disk ua-disk-data added"]
