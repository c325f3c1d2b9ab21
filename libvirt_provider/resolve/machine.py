"""Firmware, assembly of the resolved areas into a machine, and the resolver entry point."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from catalog.image import CdromBus, DiskBus, LibvirtImage
from catalog.lookup import Catalog
from generic.api import VirtualMachineSpec
from generic.formats import validation_details
from libvirt_provider.api import GraphicsType, LibvirtMachine
from libvirt_provider.constants import REASON_INVALID_SPEC
from libvirt_provider.driver.types import NetworkDhcp
from libvirt_provider.naming import console_log_file
from libvirt_provider.resolve.bootstrap import resolve_cloud_init
from libvirt_provider.resolve.cloudinit import cloud_init_digest, legacy_cloud_init_digest
from libvirt_provider.resolve.compute import (
    Size,
    check_placement,
    resolve_domain_type,
    resolve_size,
)
from libvirt_provider.resolve.context import (
    LM,
    VM,
    Context,
    HostOffer,
    Problem,
    Resolution,
    SecretData,
    validation_problems,
)
from libvirt_provider.resolve.network import resolve_interfaces
from libvirt_provider.resolve.storage import (
    resolve_boot_disk,
    resolve_data_disks,
    resolve_disk_limits,
)
from libvirt_provider.resolved import (
    CloudInitData,
    CloudInitMedia,
    Console,
    DiskClass,
    DomainDisk,
    DomainSpec,
    DomainType,
    FirmwareKind,
    Graphics,
    Interface,
    IoTune,
    NicSubnets,
    OsBoot,
    Owner,
    PublicAddress,
    ResolvedMachine,
    VolumePlan,
)

__all__ = ["resolve_machine"]

_GRAPHICS = {
    GraphicsType.NONE: Graphics.NONE,
    GraphicsType.VNC: Graphics.VNC,
    GraphicsType.SPICE: Graphics.SPICE,
}
_TARGET_PREFIX = {"virtio": "vd", "scsi": "sd", "sata": "sd", "ide": "hd"}
M = TypeVar("M", bound=BaseModel)


def resolve_os(ctx: Context, image: LibvirtImage) -> tuple[OsBoot, CdromBus] | None:
    firmware = ctx.machine.spec.firmware or image.spec.firmware
    machine_type = ctx.machine.spec.machine_type or image.spec.guest.machine_type
    q35 = "q35" in machine_type
    ok = True
    if firmware.secure_boot and not q35:
        ctx.problem(
            REASON_INVALID_SPEC,
            f"{LM}.spec.firmware" if ctx.machine.spec.firmware else f"{VM}.spec.bootDisk",
            f"Secure Boot needs a q35 machine type (for SMM); this machine is {machine_type}",
        )
        ok = False
    cdrom_bus = image.spec.guest.cdrom_bus
    if cdrom_bus is CdromBus.IDE and q35:
        ctx.problem(
            REASON_INVALID_SPEC,
            f"LibvirtImage {image.metadata.name}",
            "q35 machines have no IDE bus: use cdromBus scsi, or machine type pc",
        )
        ok = False
    if not ok:
        return None
    kind = FirmwareKind.EFI if firmware.type.value == "UEFI" else FirmwareKind.BIOS
    boot = OsBoot(machine_type=machine_type, firmware=kind, secure_boot=firmware.secure_boot)
    return boot, cdrom_bus


def resolve_pair(ctx: Context) -> Resolution:
    check_placement(ctx)
    domain_type = resolve_domain_type(ctx)
    size = resolve_size(ctx, domain_type)
    boot = resolve_boot_disk(ctx)
    data_plans = resolve_data_disks(ctx)
    limits = resolve_disk_limits(ctx)
    image = boot[0] if boot is not None else None
    nics, configs, customised, subnets, public = resolve_interfaces(ctx, image)
    cloud_init = resolve_cloud_init(
        ctx,
        configs=configs,
        customised=customised,
        pool=boot[1].pool if boot is not None else None,
    )
    booting = resolve_os(ctx, image) if image is not None else None
    try:
        owner = Owner(
            namespace=ctx.machine.metadata.namespace,
            name=ctx.machine.metadata.name,
            uid=uuid.UUID(ctx.machine.metadata.uid),
            virtual_machine=ctx.vm_name,
            tags=dict(ctx.vm.tags or {}),
        )
    except (ValidationError, ValueError) as error:
        owner = None
        ctx.problem(REASON_INVALID_SPEC, f"{VM}.spec.tags or {LM}.metadata.uid", _short(error))
    if ctx.problems:
        return Resolution(machine=None, problems=tuple(ctx.problems))
    if domain_type is None or size is None or boot is None or booting is None or owner is None:
        raise AssertionError("a part is missing without a problem saying why")
    os_boot, cdrom_bus = booting
    boot_image, boot_plan = boot
    return _assemble(
        ctx,
        domain_type=domain_type,
        size=size,
        owner=owner,
        os_boot=os_boot,
        cdrom_bus=cdrom_bus,
        disk_bus=boot_image.spec.guest.disk_bus,
        plans=[boot_plan, *data_plans],
        limits=limits,
        nics=nics,
        subnets=subnets,
        public=public,
        cloud_init=cloud_init,
    )


def _assemble(
    ctx: Context,
    *,
    domain_type: DomainType,
    size: Size,
    owner: Owner,
    os_boot: OsBoot,
    cdrom_bus: CdromBus,
    disk_bus: DiskBus,
    plans: list[VolumePlan],
    limits: dict[str, tuple[str | None, IoTune]],
    nics: list[Interface],
    subnets: list[NicSubnets],
    public: list[PublicAddress],
    cloud_init: CloudInitData | None,
) -> Resolution:
    targets = _TargetNames()
    names = ["boot" if index == 0 else f"data-{plan.disk}" for index, plan in enumerate(plans)]
    disks = [
        DomainDisk(
            name=names[index],
            pool=plan.pool,
            volume=plan.volume,
            format=plan.format,
            bus=disk_bus,
            target=targets.next(disk_bus.value),
            serial=plan.disk[:20],
            boot=index == 0,
            iotune=limits[names[index]][1],
        )
        for index, plan in enumerate(plans)
    ]
    media = None
    if cloud_init is not None:
        media = CloudInitMedia(
            pool=cloud_init.pool,
            volume=cloud_init.volume,
            bus=cdrom_bus,
            target=targets.next(cdrom_bus.value),
            digest=_seed_digest(ctx, cloud_init),
        )
    console = ctx.machine.spec.console
    try:
        spec = DomainSpec(
            name=ctx.domain,
            uuid=owner.uid,
            domain_type=domain_type,
            owner=owner,
            cpu=size.cpu,
            memory=size.memory,
            os=os_boot,
            disks=tuple(disks),
            cloud_init=media,
            interfaces=tuple(nics),
            console=Console(
                serial=console.serial,
                log_file=console_log_file(ctx.host.console_log_dir, ctx.domain)
                if console.serial
                else None,
                graphics=_GRAPHICS[console.graphics],
            ),
        )
        machine = ResolvedMachine(
            domain=spec,
            volumes=tuple(plans),
            cloud_init=cloud_init,
            autostart=ctx.machine.spec.autostart,
            shutdown_timeout_seconds=ctx.machine.spec.graceful_shutdown_timeout_seconds,
            nic_subnets=tuple(subnets),
            disk_classes=tuple(
                DiskClass(disk=name, volume_attributes_class=limits[name][0]) for name in names
            ),
            public_addresses=tuple(public),
            spot=bool(ctx.vm.scheduling is not None and ctx.vm.scheduling.spot),
        )
    except ValidationError as error:
        return Resolution(machine=None, problems=tuple(validation_problems(error, VM)))
    return Resolution(machine=machine)


def _seed_digest(ctx: Context, data: CloudInitData) -> str:
    """The keyed digest; a domain made before digests were keyed keeps its unkeyed one while it
    still describes the seed, so an upgrade reports no cloud-init change on running machines."""
    keyed = cloud_init_digest(data, key=ctx.seed_key)
    existing = ctx.existing_seed_digest
    if existing is not None and existing != keyed and existing == legacy_cloud_init_digest(data):
        return existing
    return keyed


def _parse(
    model: type[M], value: M | Mapping[str, Any], where: str, out: list[Problem]
) -> M | None:
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value)
    except ValidationError as error:
        out.extend(validation_problems(error, where))
        return None


class _TargetNames:
    """vda, vdb, ... per bus family, in the order devices are added (sata and scsi share sd)."""

    def __init__(self) -> None:
        self._used: dict[str, int] = {}

    def next(self, bus: str) -> str:
        prefix = _TARGET_PREFIX[bus]
        index = self._used.get(prefix, 0)
        self._used[prefix] = index + 1
        return prefix + _letters(index)


def _letters(index: int) -> str:
    """0 -> a, 25 -> z, 26 -> aa: the kernel's own disk naming."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("a") + rest) + letters
    return letters


def _short(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return "; ".join(message for _, message in validation_details(error))
    return str(error)


def resolve_machine(
    *,
    vm_name: str,
    vm_spec: VirtualMachineSpec | Mapping[str, Any],
    machine: LibvirtMachine | Mapping[str, Any],
    catalog: Catalog,
    secrets: SecretData,
    host: HostOffer,
    domain_name: str | None = None,
    existing_macs: frozenset[str] = frozenset(),
    seed_key: str = "",
    existing_seed_digest: str | None = None,
    existing_volumes: frozenset[tuple[str, str]] = frozenset(),
    unreadable_secrets: frozenset[str] = frozenset(),
    secrets_deferred: bool = False,
    public_addresses: Mapping[str, str] | None = None,
    network_dhcp: Mapping[str, NetworkDhcp | None] | None = None,
) -> Resolution:
    """Resolve a linked VM + LibvirtMachine pair for `host`. Raw dicts are parsed here, so a spec
    the models refuse becomes a problem to report rather than an exception. `domain_name` is the
    name the machine's domain already has (by default, the one derived from its identity);
    `existing_macs` the MACs its definition holds (see naming), `existing_seed_digest` its
    cloud-init digest, `existing_volumes` the (pool, volume) of its disks. `seed_key` keys the
    cloud-init digest: the VirtualMachine's uid, which
    libvirt never sees. `public_addresses` are the addresses the machine's claims hold, by
    interface, and `network_dhcp` the DHCP of the libvirt networks they use (both None where
    they are not looked at: placement)."""
    problems: list[Problem] = []
    vm = _parse(VirtualMachineSpec, vm_spec, f"{VM}.spec", problems)
    libvirt_machine = _parse(LibvirtMachine, machine, LM, problems)
    if vm is None or libvirt_machine is None:
        return Resolution(machine=None, problems=tuple(problems))
    context = Context(
        vm_name=vm_name,
        vm=vm,
        machine=libvirt_machine,
        catalog=catalog,
        secrets=secrets,
        host=host,
        domain_name=domain_name,
        existing_macs=existing_macs,
        seed_key=seed_key,
        existing_seed_digest=existing_seed_digest,
        existing_volumes=existing_volumes,
        unreadable_secrets=unreadable_secrets,
        secrets_deferred=secrets_deferred,
        public_addresses=public_addresses,
        network_dhcp=network_dhcp,
    )
    return resolve_pair(context)
