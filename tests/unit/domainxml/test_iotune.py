"""A disk's I/O limits (`<iotune>`, from its VolumeAttributesClass): rendered as libvirt writes
them, read back equal, compared apart from the disk's other facts, and changed live."""

from __future__ import annotations

from lxml import etree

from catalog.image import DiskBus, ImageFormat
from libvirt_provider.domainxml import (
    DeviceAction,
    DeviceEdit,
    DeviceKind,
    SetBlockIoTune,
    differences,
    plan_live_update,
    render_domain_xml,
)
from libvirt_provider.domainxml.disks import iotune_parameters, parse_disks
from libvirt_provider.resolved import DomainDisk, DomainSpec, IoTune
from tests.unit.domainxml.cases import machine

MI = 2**20
SLOW = IoTune(read_bytes_sec=10 * MI)
FAST = IoTune(read_bytes_sec=100 * MI, read_bytes_sec_max=200 * MI, read_bytes_sec_max_length=5)


def _spec(iotune: IoTune, *, bus: DiskBus = DiskBus.VIRTIO, serial: str = "data") -> DomainSpec:
    base = machine("iotune")
    data = DomainDisk(
        name="data",
        pool="p",
        volume="data.qcow2",
        format=ImageFormat.QCOW2,
        bus=bus,
        target="vdb" if bus is DiskBus.VIRTIO else "sdb",
        serial=serial,
        iotune=iotune,
    )
    return base.model_copy(update={"disks": (*base.disks, data)})


def _xml(iotune: IoTune, **kwargs: object) -> str:
    return render_domain_xml(_spec(iotune, **kwargs))  # type: ignore[arg-type]


def test_only_the_limits_set_are_rendered_in_libvirts_order(
    domain_schema: etree.RelaxNG,
) -> None:
    root = etree.fromstring(_xml(FAST))
    domain_schema.assertValid(root)
    data = root.findall("devices/disk")[1]
    assert [e.tag for e in data.find("iotune")] == [  # type: ignore[union-attr]
        "read_bytes_sec",
        "read_bytes_sec_max",
        "read_bytes_sec_max_length",
    ]
    assert [e.tag for e in data][:4] == ["driver", "source", "target", "iotune"]
    assert root.findall("devices/disk")[0].find("iotune") is None  # no limits, no element


def test_read_back_equal_and_zeros_mean_unset() -> None:
    facts = parse_disks(etree.fromstring(_xml(SLOW)))["ua-disk-data"]
    assert facts.iotune == (("read_bytes_sec", str(10 * MI)),)
    # libvirt may write an unset limit as 0: the same as not writing it.
    root = etree.fromstring(_xml(SLOW))
    iotune = root.findall("devices/disk")[1].find("iotune")
    etree.SubElement(iotune, "write_iops_sec").text = "0"  # type: ignore[arg-type]
    assert parse_disks(root)["ua-disk-data"].iotune == facts.iotune
    assert differences(etree.tostring(root, encoding="unicode"), _xml(SLOW)) == []


def test_changed_limits_are_one_live_change_of_their_own() -> None:
    plan = plan_live_update(_xml(SLOW), _xml(FAST))
    assert plan.deferred == ()
    [(change, step)] = plan.steps
    assert change.key == DeviceEdit(DeviceKind.DISK, "ua-disk-data", DeviceAction.IO_LIMITS)
    assert change.what == "disk ua-disk-data I/O limits"
    assert isinstance(step, SetBlockIoTune)
    assert step.target == "vdb"
    given = dict(step.parameters)
    assert given["read_bytes_sec"] == 100 * MI
    assert given["read_bytes_sec_max_length"] == 5
    assert given["total_bytes_sec"] == 0  # every parameter is given: dropped limits are cleared
    assert len(given) == 18


def test_removing_the_class_clears_every_limit_live() -> None:
    [(_, step)] = plan_live_update(_xml(FAST), _xml(IoTune())).steps
    assert isinstance(step, SetBlockIoTune)
    assert set(dict(step.parameters).values()) == {0}


def test_a_group_name_is_passed_on() -> None:
    grouped = IoTune(total_iops_sec=50, group_name="tenant-a")
    [(_, step)] = plan_live_update(_xml(IoTune()), _xml(grouped)).steps
    assert isinstance(step, SetBlockIoTune)
    assert dict(step.parameters)["group_name"] == "tenant-a"
    assert dict(step.parameters)["total_iops_sec"] == 50


def test_limits_change_live_even_where_the_rest_of_the_disk_waits() -> None:
    plan = plan_live_update(_xml(SLOW), _xml(FAST, serial="other"))
    assert [c.what for c in plan.deferred] == ["disk ua-disk-data"]
    assert [type(s) for _, s in plan.steps] == [SetBlockIoTune]
    # A SATA disk cannot be hot-plugged, but its limits still change live.
    sata = plan_live_update(_xml(SLOW, bus=DiskBus.SATA), _xml(FAST, bus=DiskBus.SATA))
    assert sata.deferred == ()
    assert [type(s) for _, s in sata.steps] == [SetBlockIoTune]


def test_other_disk_changes_are_unchanged_by_limits() -> None:
    plan = plan_live_update(_xml(SLOW), _xml(SLOW, serial="other"))
    assert plan.steps == ()
    assert [c.what for c in plan.deferred] == ["disk ua-disk-data"]


def test_a_disk_added_with_limits_is_attached_with_them() -> None:
    base = machine("iotune")
    plan = plan_live_update(render_domain_xml(base), _xml(SLOW))
    [(change, step)] = plan.steps
    assert change.key.action is DeviceAction.ADDED  # type: ignore[union-attr]
    assert "<read_bytes_sec>10485760</read_bytes_sec>" in step.xml  # type: ignore[union-attr]


def test_parameters_from_read_back_facts() -> None:
    values = iotune_parameters((("group_name", "g"), ("write_iops_sec", "7")))
    assert values["write_iops_sec"] == 7
    assert values["group_name"] == "g"
    assert values["read_bytes_sec"] == 0
