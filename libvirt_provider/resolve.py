"""The resolver: generic VM + LibvirtMachine + catalog + Secret data + host facts -> a machine.

Pure and total: it either returns a fully resolved machine or every problem it found, each with
the condition reason it maps to. `UnsupportedByProvider` (from the vm-api.io contract) marks what
this provider cannot honour at all: spot scheduling, public IPs, snapshot sources, volume attributes
classes, non-catalog references, a VM without a boot disk. The provider's own reasons mark what the
user can fix: a reference that resolves to nothing, an ambiguous default, an invalid combination,
a missing Secret or key, something this host does not offer.

It never ignores a requested field: each one is either used or reported. It never puts Secret
contents into a problem message: only Secret names and keys.
"""

from __future__ import annotations

import ipaddress
import math
import uuid
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, SecretBytes, ValidationError

from catalog.image import CdromBus, DiskBus, ImageFormat, LibvirtImage, NicModel
from catalog.lookup import AmbiguousDefaultError, Catalog
from catalog.machineclass import CpuMode as CatalogCpuMode
from catalog.machineclass import CpuSpec
from catalog.network import LibvirtNetwork
from catalog.quantity import QuantityError, parse_quantity
from catalog.storage import LibvirtStorageClassSpec
from generic.api import (
    BootDisk,
    ObjectReference,
    SecretKeySelector,
    VirtualMachineSpec,
)
from generic.api import Disk as VmDisk
from generic.api import Interface as VmInterface
from generic.constants import REASON_UNSUPPORTED_BY_PROVIDER
from libvirt_provider.api import DomainTypeChoice, GraphicsType, LibvirtMachine
from libvirt_provider.cloudinit import NetworkInterfaceConfig, cloud_init_digest, network_config
from libvirt_provider.constants import (
    GROUP,
    IMAGE_KIND,
    NETWORK_KIND,
    REASON_AMBIGUOUS_DEFAULT,
    REASON_INVALID_SPEC,
    REASON_NOT_AVAILABLE_ON_HOST,
    REASON_REFERENCE_NOT_FOUND,
    REASON_SECRET_NOT_FOUND,
)
from libvirt_provider.naming import domain_name, mac_address, volume_name
from libvirt_provider.resolved import (
    BaseImage,
    CloudInitData,
    CloudInitMedia,
    Console,
    Cpu,
    CpuMode,
    CpuTopology,
    Disk,
    DomainSpec,
    DomainType,
    FirmwareKind,
    Graphics,
    Interface,
    InterfaceKind,
    Memory,
    OsBoot,
    Owner,
    ResolvedMachine,
    VolumePlan,
)

__all__ = ["HostFacts", "Problem", "Resolution", "SecretData", "resolve_machine"]

GIB = 2**30
MIB = 2**20
VM = "VirtualMachine"
LM = "LibvirtMachine"

SecretData = Mapping[str, Mapping[str, bytes]]
"""Secret name -> key -> decoded value, for the Secrets the VM references (same namespace)."""

_CPU_MODES = {
    CatalogCpuMode.HOST_MODEL: CpuMode.HOST_MODEL,
    CatalogCpuMode.HOST_PASSTHROUGH: CpuMode.HOST_PASSTHROUGH,
    CatalogCpuMode.MAXIMUM: CpuMode.MAXIMUM,
    CatalogCpuMode.CUSTOM: CpuMode.CUSTOM,
}
_GRAPHICS = {
    GraphicsType.NONE: Graphics.NONE,
    GraphicsType.VNC: Graphics.VNC,
    GraphicsType.SPICE: Graphics.SPICE,
}
_TARGET_PREFIX = {"virtio": "vd", "scsi": "sd", "sata": "sd", "ide": "hd"}


class HostFacts(Protocol):
    """What the resolver needs to know about the host it resolves for."""

    @property
    def hostname(self) -> str: ...
    @property
    def domain_types(self) -> AbstractSet[str]: ...
    @property
    def pools(self) -> AbstractSet[str]: ...
    @property
    def networks(self) -> AbstractSet[str]: ...


@dataclass(frozen=True)
class Problem:
    """Why the machine cannot be resolved, and the condition reason that says so."""

    reason: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class Resolution:
    """Either `machine` (and no problems) or the problems (and no machine)."""

    machine: ResolvedMachine | None
    problems: tuple[Problem, ...] = ()

    @property
    def ok(self) -> bool:
        return self.machine is not None

    def message(self) -> str:
        """All problems in one readable paragraph, for a condition message or an Event."""
        return "; ".join(str(p) for p in self.problems)


M = TypeVar("M", bound=BaseModel)


def _parse(
    model: type[M], value: M | Mapping[str, Any], where: str, out: list[Problem]
) -> M | None:
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value)
    except ValidationError as error:
        # include_input=False: the rejected value itself never reaches a message.
        for detail in error.errors(include_input=False, include_url=False):
            path = ".".join(str(part) for part in detail["loc"])
            out.append(
                Problem(REASON_INVALID_SPEC, f"{where}.{path}" if path else where, detail["msg"])
            )
        return None


def _validation_problems(error: ValidationError, where: str) -> list[Problem]:
    return [
        Problem(
            REASON_INVALID_SPEC,
            f"{where}.{'.'.join(str(part) for part in detail['loc'])}",
            detail["msg"],
        )
        for detail in error.errors(include_input=False, include_url=False)
    ]


@dataclass
class _Size:
    cpu: Cpu
    memory: Memory


@dataclass
class _Placement:
    """Where a disk's volume lives."""

    pool: str
    storage: LibvirtStorageClassSpec | None


@dataclass
class _Resolver:
    vm_name: str
    vm: VirtualMachineSpec
    machine: LibvirtMachine
    catalog: Catalog
    secrets: SecretData
    host: HostFacts
    problems: list[Problem] = field(default_factory=list)

    def problem(self, reason: str, where: str, message: str) -> None:
        self.problems.append(Problem(reason, where, message))

    def unsupported(self, where: str, message: str) -> None:
        self.problem(REASON_UNSUPPORTED_BY_PROVIDER, where, message)

    @property
    def domain(self) -> str:
        meta = self.machine.metadata
        return domain_name(meta.namespace, meta.name)

    # -- placement and platform ------------------------------------------------------------

    def check_placement(self) -> None:
        wanted = self.machine.spec.host
        if wanted is not None and wanted != self.host.hostname:
            self.problem(
                REASON_NOT_AVAILABLE_ON_HOST,
                f"{LM}.spec.host",
                f"the machine is placed on host {wanted!r}, not on this host "
                f"{self.host.hostname!r}",
            )
        placed = wanted or self.host.hostname
        if self.vm.failure_domain is not None and self.vm.failure_domain != placed:
            self.problem(
                REASON_INVALID_SPEC,
                f"{VM}.spec.failureDomain",
                f"for the libvirt provider a failure domain is a host; {self.vm.failure_domain!r} "
                f"is not the machine's host {placed!r}",
            )
        if self.vm.scheduling is not None and self.vm.scheduling.spot:
            self.unsupported(
                f"{VM}.spec.scheduling.spot",
                "libvirt hosts have no spot or preemptible capacity",
            )

    def resolve_domain_type(self) -> DomainType | None:
        offered = set(self.host.domain_types)
        choice = self.machine.spec.domain_type
        if choice is DomainTypeChoice.AUTO:
            for candidate in (DomainType.KVM, DomainType.QEMU):
                if candidate.value in offered:
                    return candidate
        elif choice.value in offered:
            return DomainType(choice.value)
        self.problem(
            REASON_NOT_AVAILABLE_ON_HOST,
            f"{LM}.spec.domainType",
            f"domain type {choice.value} is not available on host {self.host.hostname!r} "
            f"(it offers: {', '.join(sorted(offered)) or 'none'})",
        )
        return None

    # -- size ------------------------------------------------------------------------------

    def _bytes(self, text: str | int, where: str) -> int | None:
        try:
            return text if isinstance(text, int) else parse_quantity(text)
        except QuantityError as error:
            self.problem(REASON_INVALID_SPEC, where, str(error))
            return None

    def resolve_size(self, domain_type: DomainType | None) -> _Size | None:
        instance = self.vm.instance_type
        where = f"{VM}.spec.instanceType"
        if instance is None:
            self.problem(
                REASON_INVALID_SPEC,
                where,
                "instanceType is required: name a LibvirtMachineClass or give resources",
            )
            return None
        cpu_spec: CpuSpec | None = None
        topology = None
        hugepage_kib = None
        if instance.name is not None:
            profile = self.catalog.machine_classes.get(instance.name)
            if profile is None:
                self.problem(
                    REASON_REFERENCE_NOT_FOUND,
                    f"{where}.name",
                    f"LibvirtMachineClass {instance.name!r} not found",
                )
                return None
            cpus = profile.spec.cpus
            memory = self._bytes(profile.spec.memory, f"LibvirtMachineClass {instance.name}")
            cpu_spec = profile.spec.cpu
            if profile.spec.topology is not None:
                t = profile.spec.topology
                topology = CpuTopology(sockets=t.sockets, cores=t.cores, threads=t.threads)
            if profile.spec.hugepages is not None:
                hugepage_kib = parse_quantity(profile.spec.hugepages.page_size) // 1024
        else:
            assert instance.resources is not None  # exactly one, by the model
            cpus = instance.resources.cpus
            memory = self._bytes(instance.resources.memory, f"{where}.resources.memory")
        if memory is None:
            return None
        if memory < MIB:
            self.problem(REASON_INVALID_SPEC, where, "memory must be at least 1Mi")
            return None
        memory_mib = math.ceil(memory / MIB)  # qemu sizes RAM in whole MiB anyway

        cpu_spec = self.machine.spec.cpu or cpu_spec
        mode = _CPU_MODES[cpu_spec.mode] if cpu_spec is not None else None
        if mode is None and domain_type is DomainType.KVM:
            mode = CpuMode.HOST_MODEL  # kvm's own default (kvm64) hides most host features
        if mode is CpuMode.HOST_PASSTHROUGH and domain_type is DomainType.QEMU:
            self.problem(
                REASON_INVALID_SPEC,
                f"{LM}.spec.cpu" if self.machine.spec.cpu else where,
                "CPU mode HostPassthrough needs KVM, and this machine runs emulated (qemu); "
                "use Maximum or HostModel",
            )

        max_cpus, max_mib = cpus, memory_mib
        hotplug = self.machine.spec.hotplug
        if hotplug is not None and hotplug.max_cpus is not None:
            if hotplug.max_cpus < cpus:
                self.problem(
                    REASON_INVALID_SPEC,
                    f"{LM}.spec.hotplug.maxCPUs",
                    f"maxCPUs {hotplug.max_cpus} is below the requested {cpus} vCPUs",
                )
            max_cpus = max(cpus, hotplug.max_cpus)
        if hotplug is not None and hotplug.max_memory is not None:
            ceiling = self._bytes(hotplug.max_memory, f"{LM}.spec.hotplug.maxMemory")
            if ceiling is not None:
                if ceiling < memory:
                    self.problem(
                        REASON_INVALID_SPEC,
                        f"{LM}.spec.hotplug.maxMemory",
                        f"maxMemory {hotplug.max_memory} is below the requested memory",
                    )
                max_mib = max(memory_mib, math.ceil(ceiling / MIB))
        if (
            topology is not None
            and topology.sockets * topology.cores * topology.threads != max_cpus
        ):
            self.problem(
                REASON_INVALID_SPEC,
                f"{LM}.spec.hotplug.maxCPUs",
                f"the class's CPU topology gives {cpus} vCPUs, so maxCPUs cannot be {max_cpus}",
            )
            return None
        try:
            return _Size(
                cpu=Cpu(
                    vcpus=cpus,
                    max_vcpus=max_cpus,
                    mode=mode,
                    model=cpu_spec.model if cpu_spec is not None else None,
                    topology=topology,
                ),
                memory=Memory(current_mib=memory_mib, max_mib=max_mib, hugepage_kib=hugepage_kib),
            )
        except ValidationError as error:
            self.problems.extend(_validation_problems(error, where))
            return None

    # -- references ------------------------------------------------------------------------

    def _reference(self, ref: ObjectReference, kind: str, where: str) -> bool:
        if ref.api_group == GROUP and ref.kind == kind:
            return True
        self.unsupported(
            where,
            f"the libvirt provider resolves this reference only to {kind}.{GROUP}, "
            f"not to {ref.kind}.{ref.api_group}",
        )
        return False

    def resolve_image(self, ref: ObjectReference, where: str) -> LibvirtImage | None:
        if not self._reference(ref, IMAGE_KIND, where):
            return None
        image = self.catalog.images.get(ref.name)
        if image is None:
            self.problem(REASON_REFERENCE_NOT_FOUND, where, f"LibvirtImage {ref.name!r} not found")
        return image

    def resolve_storage(self, class_name: str | None, where: str) -> _Placement | None:
        if class_name is None:
            try:
                storage = self.catalog.default_storage_class()
            except AmbiguousDefaultError as error:
                self.problem(REASON_AMBIGUOUS_DEFAULT, where, str(error))
                return None
            if storage is None:
                self.problem(
                    REASON_REFERENCE_NOT_FOUND,
                    where,
                    "no storageClassName is given and no LibvirtStorageClass is marked default",
                )
                return None
        else:
            storage = self.catalog.storage_classes.get(class_name)
            if storage is None:
                self.problem(
                    REASON_REFERENCE_NOT_FOUND,
                    f"{where}.storageClassName",
                    f"storage class {class_name!r} has no LibvirtStorageClass",
                )
                return None
        pool = storage.spec.pool_on(self.host.hostname)
        if not self._pool_on_host(pool, where):
            return None
        return _Placement(pool=pool, storage=storage.spec)

    def _pool_on_host(self, pool: str, where: str) -> bool:
        if pool in self.host.pools:
            return True
        self.problem(
            REASON_NOT_AVAILABLE_ON_HOST,
            where,
            f"storage pool {pool!r} does not exist on host {self.host.hostname!r}",
        )
        return False

    def resolve_base_image(self, image: LibvirtImage, pool: str, where: str) -> BaseImage | None:
        source = image.spec.source
        fmt = image.spec.format
        if source.volume is not None:
            if not self._pool_on_host(source.volume.pool, where):
                return None
            return BaseImage(
                image=image.metadata.name,
                pool=source.volume.pool,
                volume=source.volume.volume,
                format=fmt,
            )
        assert source.http is not None  # exactly one, by the model
        # One cached base per content checksum, shared by every machine that uses the image.
        return BaseImage(
            image=image.metadata.name,
            pool=pool,
            volume=f"image-{source.http.sha256[:32]}.{fmt.value}",
            format=fmt,
            url=str(source.http.url),
            sha256=source.http.sha256,
        )

    # -- disks -----------------------------------------------------------------------------

    def _disk_common(self, disk: BootDisk | VmDisk, where: str) -> bool:
        ok = True
        if disk.source.snapshot is not None:
            self.unsupported(f"{where}.source.snapshot", "snapshot sources are not supported")
            ok = False
        if disk.volume_attributes_class_name is not None:
            self.unsupported(
                f"{where}.volumeAttributesClassName",
                "libvirt storage pools have no volume attributes classes",
            )
            ok = False
        return ok

    def resolve_boot_disk(self) -> tuple[LibvirtImage, VolumePlan] | None:
        where = f"{VM}.spec.bootDisk"
        boot = self.vm.boot_disk
        if boot is None:
            self.unsupported(where, "a VM without a bootDisk cannot boot on this provider")
            return None
        if not self._disk_common(boot, where) or boot.source.image is None:
            return None
        image = self.resolve_image(boot.source.image, f"{where}.source.image")
        placement = self.resolve_storage(boot.storage_class_name, where)
        if image is None or placement is None:
            return None
        base = self.resolve_base_image(image, placement.pool, f"{where}.source.image")
        if base is None:
            return None
        plan = VolumePlan(
            disk="boot",
            pool=placement.pool,
            volume=volume_name(self.domain, "boot", extension="qcow2"),
            format=ImageFormat.QCOW2,
            capacity_bytes=boot.size_gi_b * GIB,
            base=base,
            delete_on_termination=boot.delete_on_termination,
        )
        return image, plan

    def resolve_data_disks(self) -> list[VolumePlan]:
        plans: list[VolumePlan] = []
        for disk in self.vm.disks or ():
            where = f"{VM}.spec.disks[{disk.name}]"
            if not self._disk_common(disk, where):
                continue
            placement = self.resolve_storage(disk.storage_class_name, where)
            if placement is None:
                continue
            base = None
            fmt = placement.storage.volume_format if placement.storage else ImageFormat.QCOW2
            if disk.source.image is not None:
                image = self.resolve_image(disk.source.image, f"{where}.source.image")
                if image is None:
                    continue
                base = self.resolve_base_image(image, placement.pool, f"{where}.source.image")
                if base is None:
                    continue
                fmt = ImageFormat.QCOW2  # an overlay on the image
            plans.append(
                VolumePlan(
                    disk=disk.name,
                    pool=placement.pool,
                    volume=volume_name(self.domain, f"data-{disk.name}", extension=fmt.value),
                    format=fmt,
                    capacity_bytes=disk.size_gi_b * GIB,
                    base=base,
                    delete_on_termination=disk.delete_on_termination,
                )
            )
        return plans

    # -- network ---------------------------------------------------------------------------

    def _default_network(self, where: str) -> LibvirtNetwork | None:
        try:
            network = self.catalog.default_network()
        except AmbiguousDefaultError as error:
            self.problem(REASON_AMBIGUOUS_DEFAULT, where, str(error))
            return None
        if network is None:
            self.problem(
                REASON_REFERENCE_NOT_FOUND,
                where,
                "no network is named and no LibvirtNetwork is marked default",
            )
        return network

    def resolve_interfaces(
        self, image: LibvirtImage | None
    ) -> tuple[list[Interface], list[NetworkInterfaceConfig], bool]:
        """NICs, their guest-side configuration, and whether that needs a network-config."""
        declared = (self.vm.network.interfaces if self.vm.network else None) or []
        wanted: list[tuple[str, VmInterface | None]] = [(i.name, i) for i in declared] or [
            ("default", None)
        ]
        nics: list[Interface] = []
        configs: list[NetworkInterfaceConfig] = []
        customised = False
        default_model = image.spec.guest.nic_model if image is not None else NicModel.VIRTIO
        for name, spec in wanted:
            where = f"{VM}.spec.network.interfaces[{name}]"
            if spec is not None and spec.public_ip:
                self.unsupported(
                    f"{where}.publicIP", "libvirt hosts have no public IP addresses to hand out"
                )
            ref = spec.network if spec is not None else None
            if ref is None:
                network = self._default_network(where)
            elif self._reference(ref, NETWORK_KIND, f"{where}.network"):
                network = self.catalog.networks.get(ref.name)
                if network is None:
                    self.problem(
                        REASON_REFERENCE_NOT_FOUND,
                        f"{where}.network",
                        f"LibvirtNetwork {ref.name!r} not found",
                    )
            else:
                network = None
            if network is None:
                continue
            nic = self._interface(name, network, default_model, where)
            if nic is None:
                continue
            nics.append(nic)
            config = self._guest_config(nic, spec, network, where)
            configs.append(config)
            customised = customised or bool(config.addresses or config.dhcp6 or not config.dhcp4)
        return nics, configs, customised

    def _interface(
        self, name: str, network: LibvirtNetwork, default_model: NicModel, where: str
    ) -> Interface | None:
        source = network.spec.source
        if source.network is not None:
            kind, device, mode = InterfaceKind.NETWORK, source.network, None
            if device not in self.host.networks:
                self.problem(
                    REASON_NOT_AVAILABLE_ON_HOST,
                    f"{where}.network",
                    f"libvirt network {device!r} does not exist on host {self.host.hostname!r}",
                )
                return None
        elif source.bridge is not None:
            kind, device, mode = InterfaceKind.BRIDGE, source.bridge, None
        else:
            assert source.direct is not None  # exactly one, by the model
            kind, device, mode = InterfaceKind.DIRECT, source.direct.device, source.direct.mode
        try:
            return Interface(
                name=name,
                mac=mac_address(self.machine.metadata.uid, name),
                kind=kind,
                source=device,
                direct_mode=mode,
                model=network.spec.nic_model or default_model,
                address_source=network.spec.effective_address_source(),
            )
        except ValidationError as error:
            self.problems.extend(_validation_problems(error, where))
            return None

    def _guest_config(
        self, nic: Interface, spec: VmInterface | None, network: LibvirtNetwork, where: str
    ) -> NetworkInterfaceConfig:
        static = network.spec.static_addressing
        addresses = []
        for text in (spec.addresses if spec is not None else None) or ():
            address = ipaddress.ip_address(text)
            prefix = (
                static.ipv4_prefix_length if address.version == 4 else static.ipv6_prefix_length
            )
            addresses.append(f"{address}/{prefix}")
        return NetworkInterfaceConfig(
            name=nic.name,
            mac=nic.mac,
            addresses=tuple(addresses),
            dhcp4=spec.wants_dhcp4() if spec is not None else True,
            dhcp6=bool(spec.dhcp6) if spec is not None else False,
            gateway4=static.ipv4_gateway,
            gateway6=static.ipv6_gateway,
        )

    # -- cloud-init ------------------------------------------------------------------------

    def _secret(self, selector: SecretKeySelector, where: str) -> bytes | None:
        data = self.secrets.get(selector.name)
        if data is None:
            self.problem(
                REASON_SECRET_NOT_FOUND,
                where,
                f"Secret {selector.name!r} not found in namespace "
                f"{self.machine.metadata.namespace!r}",
            )
            return None
        if selector.key not in data:
            self.problem(
                REASON_SECRET_NOT_FOUND,
                where,
                f"Secret {selector.name!r} has no key {selector.key!r}",
            )
            return None
        return data[selector.key]

    def resolve_cloud_init(
        self, configs: Sequence[NetworkInterfaceConfig], customised: bool, pool: str | None
    ) -> CloudInitData | None:
        where = f"{VM}.spec.bootstrap.cloudInit"
        selectors = self.vm.bootstrap.cloud_init if self.vm.bootstrap else None
        network = self.vm.network
        nameservers = [str(a) for a in (network.nameservers if network else None) or ()]
        search = list((network.search_domains if network else None) or ())
        customised = customised or bool(nameservers or search)

        user_data = network_data = None
        if selectors is not None and selectors.user_data is not None:
            user_data = self._secret(selectors.user_data, f"{where}.userData")
        if selectors is not None and selectors.network_data is not None:
            network_data = self._secret(selectors.network_data, f"{where}.networkData")
            if customised:
                self.problem(
                    REASON_INVALID_SPEC,
                    f"{where}.networkData",
                    "give either a networkData Secret or static addresses, DHCP settings, "
                    "nameservers and search domains on the VM, not both",
                )
        elif customised:
            network_data = network_config(configs, nameservers=nameservers, search_domains=search)

        host_name = network.host_name if network else None
        needed = (
            user_data is not None
            or network_data is not None
            or bool(self.vm.ssh_public_keys)
            or host_name is not None
        )
        if not needed or pool is None:
            return None
        return CloudInitData(
            instance_id=self.machine.metadata.uid,
            hostname=host_name or self.vm_name,
            ssh_public_keys=tuple(self.vm.ssh_public_keys or ()),
            user_data=SecretBytes(user_data) if user_data is not None else None,
            network_config=SecretBytes(network_data) if network_data is not None else None,
            pool=pool,
            volume=volume_name(self.domain, "cidata", extension="iso"),
        )

    # -- firmware and assembly -------------------------------------------------------------

    def resolve_os(self, image: LibvirtImage) -> tuple[OsBoot, CdromBus] | None:
        firmware = self.machine.spec.firmware or image.spec.firmware
        machine_type = self.machine.spec.machine_type or image.spec.guest.machine_type
        q35 = "q35" in machine_type
        ok = True
        if firmware.secure_boot and not q35:
            self.problem(
                REASON_INVALID_SPEC,
                f"{LM}.spec.firmware" if self.machine.spec.firmware else f"{VM}.spec.bootDisk",
                f"Secure Boot needs a q35 machine type (for SMM); this machine is {machine_type}",
            )
            ok = False
        cdrom_bus = image.spec.guest.cdrom_bus
        if cdrom_bus is CdromBus.IDE and q35:
            self.problem(
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

    def resolve(self) -> Resolution:
        self.check_placement()
        domain_type = self.resolve_domain_type()
        size = self.resolve_size(domain_type)
        boot = self.resolve_boot_disk()
        data_plans = self.resolve_data_disks()
        image = boot[0] if boot is not None else None
        nics, configs, customised = self.resolve_interfaces(image)
        cloud_init = self.resolve_cloud_init(
            configs, customised, boot[1].pool if boot is not None else None
        )
        booting = self.resolve_os(image) if image is not None else None
        try:
            owner = Owner(
                namespace=self.machine.metadata.namespace,
                name=self.machine.metadata.name,
                uid=uuid.UUID(self.machine.metadata.uid),
                virtual_machine=self.vm_name,
                tags=dict(self.vm.tags or {}),
            )
        except (ValidationError, ValueError) as error:
            owner = None
            self.problem(REASON_INVALID_SPEC, f"{VM}.spec.tags or {LM}.metadata.uid", _short(error))
        if self.problems:
            return Resolution(machine=None, problems=tuple(self.problems))
        if domain_type is None or size is None or boot is None or booting is None or owner is None:
            raise AssertionError("a part is missing without a problem saying why")
        os_boot, cdrom_bus = booting
        boot_image, boot_plan = boot
        return self._assemble(
            domain_type=domain_type,
            size=size,
            owner=owner,
            os_boot=os_boot,
            cdrom_bus=cdrom_bus,
            disk_bus=boot_image.spec.guest.disk_bus,
            plans=[boot_plan, *data_plans],
            nics=nics,
            cloud_init=cloud_init,
        )

    def _assemble(
        self,
        *,
        domain_type: DomainType,
        size: _Size,
        owner: Owner,
        os_boot: OsBoot,
        cdrom_bus: CdromBus,
        disk_bus: DiskBus,
        plans: list[VolumePlan],
        nics: list[Interface],
        cloud_init: CloudInitData | None,
    ) -> Resolution:
        targets = _TargetNames()
        disks = [
            Disk(
                name="boot" if plan.disk == "boot" and index == 0 else f"data-{plan.disk}",
                pool=plan.pool,
                volume=plan.volume,
                format=plan.format,
                bus=disk_bus,
                target=targets.next(disk_bus.value),
                serial=plan.disk[:20],
                boot=index == 0,
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
                digest=cloud_init_digest(cloud_init),
            )
        console = self.machine.spec.console
        try:
            spec = DomainSpec(
                name=self.domain,
                uuid=owner.uid,
                domain_type=domain_type,
                owner=owner,
                cpu=size.cpu,
                memory=size.memory,
                os=os_boot,
                disks=tuple(disks),
                cloud_init=media,
                interfaces=tuple(nics),
                console=Console(serial=console.serial, graphics=_GRAPHICS[console.graphics]),
            )
            machine = ResolvedMachine(
                domain=spec,
                volumes=tuple(plans),
                cloud_init=cloud_init,
                autostart=self.machine.spec.autostart,
                shutdown_timeout_seconds=self.machine.spec.graceful_shutdown_timeout_seconds,
            )
        except ValidationError as error:
            return Resolution(machine=None, problems=tuple(_validation_problems(error, VM)))
        return Resolution(machine=machine)


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
        return "; ".join(d["msg"] for d in error.errors(include_input=False, include_url=False))
    return str(error)


def resolve_machine(
    *,
    vm_name: str,
    vm_spec: VirtualMachineSpec | Mapping[str, Any],
    machine: LibvirtMachine | Mapping[str, Any],
    catalog: Catalog,
    secrets: SecretData,
    host: HostFacts,
) -> Resolution:
    """Resolve a linked VM + LibvirtMachine pair for `host`. Raw dicts are parsed here, so a spec
    the models refuse becomes a problem to report rather than an exception."""
    problems: list[Problem] = []
    vm = _parse(VirtualMachineSpec, vm_spec, f"{VM}.spec", problems)
    libvirt_machine = _parse(LibvirtMachine, machine, LM, problems)
    if vm is None or libvirt_machine is None:
        return Resolution(machine=None, problems=tuple(problems))
    return _Resolver(
        vm_name=vm_name,
        vm=vm,
        machine=libvirt_machine,
        catalog=catalog,
        secrets=secrets,
        host=host,
    ).resolve()
