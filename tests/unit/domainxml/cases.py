"""A spread of resolved domains for the golden files: firmware, domain types, NIC kinds, disks."""

from __future__ import annotations

import uuid
from typing import Any

from catalog.image import CdromBus, DiskBus, ImageFormat, NicModel
from catalog.network import AddressSourcePolicy, DirectMode
from libvirt_provider.naming import domain_name, mac_address
from libvirt_provider.resolved import (
    CloudInitMedia,
    Console,
    Cpu,
    CpuMode,
    CpuTopology,
    DomainDisk,
    DomainSpec,
    DomainType,
    FirmwareKind,
    Graphics,
    Interface,
    InterfaceKind,
    IoTune,
    Memory,
    OsBoot,
    Owner,
)

POOL = "vmapi-lab"
_NS = uuid.UUID("0b5f0c8e-6a2f-4a8e-9d0c-6f0c3b1f1a00")


def boot_disk(domain: str, *, bus: DiskBus = DiskBus.VIRTIO, target: str = "vda") -> DomainDisk:
    return DomainDisk(
        name="boot",
        pool=POOL,
        volume=f"{domain}--boot.qcow2",
        format=ImageFormat.QCOW2,
        bus=bus,
        target=target,
        serial="boot",
        boot=True,
    )


def nic(
    uid: uuid.UUID,
    index: int,
    kind: InterfaceKind,
    *,
    model: NicModel = NicModel.VIRTIO,
    source: AddressSourcePolicy = AddressSourcePolicy.LEASE,
    mode: DirectMode = DirectMode.BRIDGE,
) -> Interface:
    name = f"nic{index}"
    sources = {
        InterfaceKind.NETWORK: f"vmapi-net{index}",
        InterfaceKind.BRIDGE: f"br{index}",
        InterfaceKind.DIRECT: f"eth{index}",
    }
    return Interface(
        name=name,
        mac=mac_address(str(uid), name),
        kind=kind,
        source=sources[kind],
        direct_mode=mode if kind is InterfaceKind.DIRECT else None,
        model=model,
        address_source=source,
    )


def machine(case: str, **overrides: Any) -> DomainSpec:
    uid = _uid(case)
    name = _domain(case)
    fields: dict[str, Any] = {
        "name": name,
        "uuid": uid,
        "domain_type": DomainType.KVM,
        "owner": Owner(namespace="default", name=case, uid=uid, virtual_machine=case),
        "cpu": Cpu(vcpus=1, max_vcpus=1, mode=CpuMode.HOST_MODEL),
        "memory": Memory(current_mib=512, max_mib=512),
        "os": OsBoot(machine_type="q35", firmware=FirmwareKind.BIOS),
        "disks": (boot_disk(name),),
        "interfaces": (nic(uid, 0, InterfaceKind.NETWORK),),
    }
    fields.update(overrides)
    return DomainSpec(**fields)


def _uid(case: str) -> uuid.UUID:
    return uuid.uuid5(_NS, case)


def _domain(case: str) -> str:
    return domain_name("default", case, str(_uid(case)))


# Disks of many-disks-spice-no-serial with I/O limits (VolumeAttributesClasses): bytes with a
# group, and operations with a burst and its length.
_LIMITS = {
    1: IoTune(read_bytes_sec=10 * 2**20, write_bytes_sec=5 * 2**20, group_name="tenant-a"),
    2: IoTune(total_iops_sec=200, total_iops_sec_max=400, total_iops_sec_max_length=10),
}


def _cases() -> dict[str, DomainSpec]:
    cases: dict[str, DomainSpec] = {}

    cases["bios-kvm-minimal"] = machine("bios-kvm-minimal")

    name = "uefi-qemu-cloudinit"
    cases[name] = machine(
        name,
        domain_type=DomainType.QEMU,
        cpu=Cpu(vcpus=2, max_vcpus=2, mode=None),
        memory=Memory(current_mib=1024, max_mib=1024),
        os=OsBoot(machine_type="q35", firmware=FirmwareKind.EFI),
        cloud_init=CloudInitMedia(
            pool=POOL,
            volume=f"{_domain(name)}--cidata.iso",
            bus=CdromBus.SCSI,
            target="sda",
            digest="5" * 64,
        ),
        interfaces=(nic(_uid(name), 0, InterfaceKind.NETWORK),),
    )

    name = "uefi-secureboot-tuned"
    cases[name] = machine(
        name,
        cpu=Cpu(
            vcpus=4,
            max_vcpus=8,
            mode=CpuMode.CUSTOM,
            model="Skylake-Server",
            topology=CpuTopology(sockets=2, cores=2, threads=2),
        ),
        memory=Memory(current_mib=2048, max_mib=4096, hugepage_kib=2048),
        os=OsBoot(machine_type="pc-q35-7.2", firmware=FirmwareKind.EFI, secure_boot=True),
        owner=Owner(
            namespace="prod",
            name=name,
            uid=_uid(name),
            virtual_machine="db-primary",
            tags={"team": "storage & <infra>", "cost-center": '"42"'},
        ),
    )

    for kind in InterfaceKind:
        for count in (1, 4):
            name = f"nics-{kind.value}-{count}"
            uid = _uid(name)
            modes = list(DirectMode)
            cases[name] = machine(
                name,
                interfaces=tuple(
                    nic(
                        uid,
                        i,
                        kind,
                        model=list(NicModel)[i % len(NicModel)],
                        source=list(AddressSourcePolicy)[i % len(AddressSourcePolicy)],
                        mode=modes[i % len(modes)],
                    )
                    for i in range(count)
                ),
            )

    name = "pc-ide-cdrom-sata-disks"
    domain = _domain(name)
    cases[name] = machine(
        name,
        domain_type=DomainType.QEMU,
        cpu=Cpu(vcpus=1, max_vcpus=1, mode=CpuMode.MAXIMUM),
        os=OsBoot(machine_type="pc", firmware=FirmwareKind.BIOS),
        disks=(
            boot_disk(domain, bus=DiskBus.SATA, target="sda"),
            DomainDisk(
                name="logs",
                pool="fast",
                volume=f"{domain}--logs.raw",
                format=ImageFormat.RAW,
                bus=DiskBus.SATA,
                target="sdb",
                serial="logs",
            ),
        ),
        cloud_init=CloudInitMedia(
            pool=POOL,
            volume=f"{domain}--cidata.iso",
            bus=CdromBus.IDE,
            target="hda",
            digest="a" * 64,
        ),
        interfaces=(nic(_uid(name), 0, InterfaceKind.NETWORK, model=NicModel.E1000),),
        console=Console(
            serial=True,
            log_file=f"/var/log/libvirt/qemu/{domain}.serial.log",
            graphics=Graphics.VNC,
        ),
    )

    name = "many-disks-spice-no-serial"
    domain = _domain(name)
    cases[name] = machine(
        name,
        cpu=Cpu(vcpus=2, max_vcpus=2, mode=CpuMode.HOST_PASSTHROUGH),
        disks=(
            boot_disk(domain),
            *(
                DomainDisk(
                    name=f"data{i}",
                    pool=POOL if i % 2 else "bulk",
                    volume=f"{domain}--data{i}.{'qcow2' if i % 2 else 'raw'}",
                    format=ImageFormat.QCOW2 if i % 2 else ImageFormat.RAW,
                    bus=DiskBus.VIRTIO if i < 2 else DiskBus.SCSI,
                    target=f"vd{'bc'[i]}" if i < 2 else f"sd{'ab'[i - 2]}",
                    serial=f"data{i}",
                    iotune=_LIMITS.get(i, IoTune()),
                )
                for i in range(4)
            ),
        ),
        cloud_init=CloudInitMedia(
            pool=POOL,
            volume=f"{domain}--cidata.iso",
            bus=CdromBus.SATA,
            target="sdc",
            digest="c" * 64,
        ),
        interfaces=(
            nic(_uid(name), 0, InterfaceKind.NETWORK),
            nic(_uid(name), 1, InterfaceKind.BRIDGE, source=AddressSourcePolicy.AGENT),
            nic(_uid(name), 2, InterfaceKind.DIRECT, mode=DirectMode.PASSTHROUGH),
        ),
        console=Console(serial=False, graphics=Graphics.SPICE),
    )

    cases["no-nic-uefi-kvm"] = machine(
        "no-nic-uefi-kvm",
        os=OsBoot(machine_type="q35", firmware=FirmwareKind.EFI),
        interfaces=(),
    )
    return cases


CASES = _cases()
