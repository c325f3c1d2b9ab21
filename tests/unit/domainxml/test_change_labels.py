"""Status and Events show labels derived from typed change keys; their text and order are fixed.

Users and the end-to-end tests read these labels in status.pendingChanges and in Events, so the
text each key yields, and the order in which changes are reported, change only on purpose.
"""

from __future__ import annotations

from catalog.image import DiskBus, ImageFormat
from libvirt_provider.domainxml import (
    DeviceAction,
    DeviceEdit,
    DeviceKind,
    Setting,
    diff_owned,
    owned_fields,
    render_domain_xml,
)
from libvirt_provider.resolved import (
    Console,
    Cpu,
    CpuMode,
    DomainDisk,
    Graphics,
    InterfaceKind,
    Memory,
)
from tests.unit.domainxml.cases import machine, nic


def test_every_setting_keeps_its_label_in_report_order() -> None:
    assert [str(s) for s in Setting] == [
        "domain name",
        "UUID",
        "domain type",
        "vCPU slots",
        "CPU mode",
        "CPU model",
        "CPU topology",
        "memory ceiling (KiB)",
        "huge pages (KiB)",
        "architecture",
        "firmware",
        "secure boot",
        "system management mode",
        "serial console",
        "serial console log",
        "graphics",
        "guest agent channel",
        "cloud-init data",
        "ownership marker",
        "tags",
        "machine type",
        "vCPUs",
        "memory (KiB)",
        "cloud-init media",
    ]


def test_a_device_label_names_the_device_and_whether_it_came_or_went() -> None:
    def label(kind: DeviceKind, device: str, action: DeviceAction) -> str:
        return str(DeviceEdit(kind, device, action))

    assert label(DeviceKind.DISK, "ua-disk-data", DeviceAction.ADDED) == "disk ua-disk-data added"
    assert label(DeviceKind.DISK, "vdb", DeviceAction.REMOVED) == "disk vdb removed"
    assert label(DeviceKind.DISK, "ua-disk-boot", DeviceAction.CHANGED) == "disk ua-disk-boot"
    mac = "52:54:00:00:00:aa"
    assert label(DeviceKind.INTERFACE, mac, DeviceAction.ADDED) == f"interface {mac} added"


def test_changes_from_every_area_come_in_setting_order_then_disks_then_interfaces() -> None:
    observed = machine(
        "order",
        cpu=Cpu(vcpus=1, max_vcpus=2, mode=CpuMode.HOST_MODEL),
        memory=Memory(current_mib=512, max_mib=1024),
    )
    data = DomainDisk(
        name="data",
        pool="p",
        volume="data.raw",
        format=ImageFormat.RAW,
        bus=DiskBus.VIRTIO,
        target="vdb",
        serial="data",
    )
    desired = observed.model_copy(
        update={
            "interfaces": (*observed.interfaces, nic(observed.uuid, 1, InterfaceKind.BRIDGE)),
            "disks": (*observed.disks, data),
            "owner": observed.owner.model_copy(update={"tags": {"team": "x"}}),
            "memory": Memory(current_mib=1024, max_mib=1024),
            "cpu": Cpu(vcpus=2, max_vcpus=2, mode=CpuMode.HOST_MODEL),
            "os": observed.os.model_copy(update={"machine_type": "pc"}),
            "console": Console(graphics=Graphics.VNC),
        }
    )
    diff = diff_owned(
        owned_fields(render_domain_xml(desired)), owned_fields(render_domain_xml(observed))
    )
    added_nic = desired.interfaces[1].mac
    assert [c.what for c in diff.changes] == [
        "graphics",
        "tags",
        "machine type",
        "vCPUs",
        "memory (KiB)",
        "disk ua-disk-data added",
        f"interface {added_nic} added",
    ]
    assert diff.keys == {
        Setting.GRAPHICS,
        Setting.TAGS,
        Setting.MACHINE_TYPE,
        Setting.VCPUS,
        Setting.MEMORY,
        DeviceEdit(DeviceKind.DISK, "ua-disk-data", DeviceAction.ADDED),
        DeviceEdit(DeviceKind.INTERFACE, added_nic, DeviceAction.ADDED),
    }
