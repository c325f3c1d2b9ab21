"""The fully resolved machine: every decision made, nothing left to look up.

The resolver produces it from the generic VM, the LibvirtMachine, the catalog, Secret data and host
facts; the renderer turns its `DomainSpec` into domain XML; the parser reads observed XML back into
the same `DomainSpec` shape so the controller can compare like with like. It holds no I/O handle and
no defaults of its own: a field here is what the domain gets.

Every string that reaches libvirt is checked here once more (safe names, XML-compatible text), so a
hostile value is refused with a clear message even if it slipped past the API's admission.
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Self
from uuid import UUID

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretBytes, model_validator

from catalog.image import CdromBus, DiskBus, ImageFormat, NicModel
from catalog.network import AddressPool, AddressSourcePolicy, DirectMode

__all__ = [
    "IOTUNE_DIRECTIONS",
    "IOTUNE_FAMILIES",
    "IOTUNE_MAX",
    "BaseImage",
    "CloudInitData",
    "CloudInitMedia",
    "Console",
    "Cpu",
    "CpuMode",
    "CpuTopology",
    "DiskClass",
    "DomainDisk",
    "DomainSpec",
    "DomainType",
    "FirmwareKind",
    "Graphics",
    "Interface",
    "InterfaceKind",
    "IoTune",
    "Memory",
    "OsBoot",
    "Owner",
    "PublicAddress",
    "ResolvedMachine",
    "VolumePlan",
]

# XML 1.0 cannot carry most control characters at all, escaped or not; refuse them up front.
_XML_INCOMPATIBLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(value: str) -> str:
    if _XML_INCOMPATIBLE.search(value):
        raise ValueError("contains control characters that XML cannot carry")
    return value


XmlText = Annotated[str, AfterValidator(_xml_text)]
SafeName = Annotated[
    str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
]
# Kubernetes object names (DNS subdomains, up to 253 characters) as they appear in the marker.
KubeName = Annotated[
    str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
]
# Device names double as libvirt user aliases (`ua-...`), whose pattern admits no `+`.
AliasName = Annotated[
    str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
]
DeviceTarget = Annotated[str, Field(pattern=r"^(vd|sd|hd)[a-z]{1,3}$")]
Mac = Annotated[str, Field(pattern=r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")]


class ResolvedModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DomainType(enum.StrEnum):
    KVM = "kvm"
    QEMU = "qemu"
    # libvirt's in-process test driver (`test:///`), the only driver that offers it: for
    # benchmarks of the control plane, where domains start instantly and run nothing.
    TEST = "test"


class CpuMode(enum.StrEnum):
    """libvirt's spelling of the CPU modes (the catalog's CamelCase values map onto these)."""

    HOST_MODEL = "host-model"
    HOST_PASSTHROUGH = "host-passthrough"
    MAXIMUM = "maximum"
    CUSTOM = "custom"


class FirmwareKind(enum.StrEnum):
    BIOS = "bios"
    EFI = "efi"


class Graphics(enum.StrEnum):
    NONE = "none"
    VNC = "vnc"
    SPICE = "spice"


class InterfaceKind(enum.StrEnum):
    NETWORK = "network"
    BRIDGE = "bridge"
    DIRECT = "direct"


class Owner(ResolvedModel):
    """Who the domain belongs to; written into `<metadata>` as the ownership marker."""

    namespace: KubeName
    name: KubeName
    uid: UUID
    virtual_machine: KubeName
    tags: dict[XmlText, XmlText] = Field(default_factory=dict)


class CpuTopology(ResolvedModel):
    sockets: int = Field(ge=1)
    cores: int = Field(ge=1)
    threads: int = Field(ge=1)


class Cpu(ResolvedModel):
    vcpus: int = Field(ge=1, description="vCPUs online at boot")
    max_vcpus: int = Field(ge=1, description="vCPU slots; above vcpus leaves room for hotplug")
    mode: CpuMode | None = Field(description="None leaves the hypervisor's default CPU")
    model: SafeName | None = None
    topology: CpuTopology | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.vcpus > self.max_vcpus:
            raise ValueError("vcpus exceeds max_vcpus")
        if (self.mode is CpuMode.CUSTOM) != (self.model is not None):
            raise ValueError("a CPU model goes with mode custom, and only with it")
        if self.topology is not None:
            t = self.topology
            if t.sockets * t.cores * t.threads != self.max_vcpus:
                raise ValueError("topology must multiply out to max_vcpus")
        return self


class Memory(ResolvedModel):
    current_mib: int = Field(ge=1)
    max_mib: int = Field(ge=1, description="above current_mib leaves room for the balloon")
    hugepage_kib: int | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.current_mib > self.max_mib:
            raise ValueError("current memory exceeds the maximum")
        return self


class OsBoot(ResolvedModel):
    arch: SafeName = "x86_64"
    machine_type: SafeName
    firmware: FirmwareKind
    secure_boot: bool = False

    @model_validator(mode="after")
    def _secure_boot_needs_efi(self) -> Self:
        if self.secure_boot and self.firmware is not FirmwareKind.EFI:
            raise ValueError("secure boot needs EFI firmware")
        return self


IOTUNE_MAX = 10**15
"""The largest rate or burst qemu's throttling accepts (THROTTLE_VALUE_MAX)."""
IoValue = Annotated[int, Field(ge=0, le=IOTUNE_MAX)]

IOTUNE_FAMILIES = ("bytes_sec", "iops_sec")
"""libvirt's two families of limits; each has a total, a read and a write value."""
IOTUNE_DIRECTIONS = ("total", "read", "write")


class IoTune(ResolvedModel):
    """A disk's I/O limits, named as libvirt's `<iotune>` children; 0 means no limit.

    The fields are in libvirt's own order (how it formats the element), which the renderer
    follows, so a definition read back lists them the same way."""

    total_bytes_sec: IoValue = 0
    read_bytes_sec: IoValue = 0
    write_bytes_sec: IoValue = 0
    total_iops_sec: IoValue = 0
    read_iops_sec: IoValue = 0
    write_iops_sec: IoValue = 0
    total_bytes_sec_max: IoValue = 0
    read_bytes_sec_max: IoValue = 0
    write_bytes_sec_max: IoValue = 0
    total_iops_sec_max: IoValue = 0
    read_iops_sec_max: IoValue = 0
    write_iops_sec_max: IoValue = 0
    group_name: SafeName | None = None
    total_bytes_sec_max_length: IoValue = 0
    read_bytes_sec_max_length: IoValue = 0
    write_bytes_sec_max_length: IoValue = 0
    total_iops_sec_max_length: IoValue = 0
    read_iops_sec_max_length: IoValue = 0
    write_iops_sec_max_length: IoValue = 0

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        # libvirt refuses these combinations; the resolver says so first, in the class's terms.
        for family in IOTUNE_FAMILIES:
            for suffix in ("", "_max", "_max_length"):
                total = getattr(self, f"total_{family}{suffix}")
                if total and (
                    getattr(self, f"read_{family}{suffix}")
                    or getattr(self, f"write_{family}{suffix}")
                ):
                    raise ValueError(f"total_{family}{suffix} goes with neither read nor write")
            for direction in IOTUNE_DIRECTIONS:
                base = getattr(self, f"{direction}_{family}")
                burst = getattr(self, f"{direction}_{family}_max")
                length = getattr(self, f"{direction}_{family}_max_length")
                if burst and burst < base:
                    raise ValueError(f"{direction}_{family}_max is below {direction}_{family}")
                if burst and not base:
                    raise ValueError(f"{direction}_{family}_max needs {direction}_{family}")
                if length and not burst:
                    raise ValueError(f"{direction}_{family}_max_length needs its _max")
        return self

    @property
    def limited(self) -> bool:
        return any(v for k, v in self.settings().items() if k != "group_name")

    def settings(self) -> dict[str, int | str]:
        """Every libvirt parameter, zero where unlimited: what virDomainSetBlockIoTune is given,
        so a parameter the class no longer sets is cleared rather than kept."""
        values: dict[str, int | str] = {
            name: getattr(self, name) for name in type(self).model_fields if name != "group_name"
        }
        if self.group_name is not None:
            values["group_name"] = self.group_name
        return values


class DomainDisk(ResolvedModel):
    """A disk backed by a pool volume. The boot disk is listed first and has `boot` set."""

    name: AliasName
    pool: SafeName
    volume: SafeName
    format: ImageFormat
    bus: DiskBus
    target: DeviceTarget
    serial: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.+-]{1,20}$")]
    boot: bool = False
    iotune: IoTune = Field(default_factory=IoTune)
    """From the disk's VolumeAttributesClass; all zero (no `<iotune>`) without one."""


class CloudInitMedia(ResolvedModel):
    """The NoCloud ISO, a pool volume attached read-only as a CD-ROM."""

    pool: SafeName
    volume: SafeName
    bus: CdromBus
    target: DeviceTarget
    digest: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] = Field(
        description="sha256 of the ISO's inputs; recorded so a Secret change is detected"
    )


class Interface(ResolvedModel):
    name: AliasName
    mac: Mac
    kind: InterfaceKind
    source: SafeName = Field(description="libvirt network, bridge or host device name")
    direct_mode: DirectMode | None = None
    model: NicModel
    address_source: AddressSourcePolicy

    @model_validator(mode="after")
    def _mode_iff_direct(self) -> Self:
        if (self.kind is InterfaceKind.DIRECT) != (self.direct_mode is not None):
            raise ValueError("direct_mode goes with kind direct, and only with it")
        return self


class Console(ResolvedModel):
    serial: bool = True
    # A host file the serial console's output is appended to, for reading a boot after the fact.
    log_file: str | None = None
    graphics: Graphics = Graphics.NONE


class DomainSpec(ResolvedModel):
    """Everything the domain XML says. The parser returns this same shape from observed XML."""

    name: SafeName
    uuid: UUID
    domain_type: DomainType
    owner: Owner
    cpu: Cpu
    memory: Memory
    os: OsBoot
    disks: tuple[DomainDisk, ...] = Field(min_length=1)
    cloud_init: CloudInitMedia | None = None
    interfaces: tuple[Interface, ...] = ()
    console: Console = Field(default_factory=Console)

    @model_validator(mode="after")
    def _unique(self) -> Self:
        targets = [d.target for d in self.disks]
        if self.cloud_init is not None:
            targets.append(self.cloud_init.target)
        if len(set(targets)) != len(targets):
            raise ValueError("two devices share a target name")
        macs = [i.mac for i in self.interfaces]
        if len(set(macs)) != len(macs):
            raise ValueError("two interfaces share a MAC address")
        if sum(d.boot for d in self.disks) != 1:
            raise ValueError("exactly one disk boots")
        return self

    @property
    def needs_guest_agent(self) -> bool:
        """Addresses read from the guest agent need its virtio channel."""
        wanted = {AddressSourcePolicy.AGENT, AddressSourcePolicy.ANY}
        return any(i.address_source in wanted for i in self.interfaces)


class BaseImage(ResolvedModel):
    """The base a volume is layered on: an existing pool volume, or one to import by URL."""

    image: str = Field(description="LibvirtImage name")
    pool: SafeName
    volume: SafeName
    format: ImageFormat
    url: str | None = None
    sha256: str | None = None
    max_bytes: int | None = None
    """The most a download may bring (the image's `maxSizeGiB`)."""
    snapshot: bool = False
    """The base is a LibvirtSnapshot's copy of a disk (`source.snapshot`; `image` is then the
    snapshot's name): a clone is an overlay on it, as a disk from an image is on the image."""

    @property
    def label(self) -> str:
        """How messages name the base: `image 'x'` or `snapshot 'x'`."""
        return f"{'snapshot' if self.snapshot else 'image'} {self.image!r}"


class VolumePlan(ResolvedModel):
    """A volume the machine owns: the driver creates it before define, deletes it on teardown."""

    disk: SafeName
    pool: SafeName
    volume: SafeName
    format: ImageFormat
    capacity_bytes: int = Field(ge=1)
    base: BaseImage | None = Field(description="None for a blank disk")
    delete_on_termination: bool = True


class CloudInitData(ResolvedModel):
    """The inputs of the NoCloud ISO. User and network data are Secret contents: never shown."""

    instance_id: str
    hostname: str | None
    ssh_public_keys: tuple[str, ...] = ()
    user_data: SecretBytes | None = None
    network_config: SecretBytes | None = None
    pool: SafeName
    volume: SafeName


class NicSubnets(ResolvedModel):
    """Where a NIC's addresses may lie, from its LibvirtNetwork's `subnets` (not in the XML)."""

    interface: AliasName
    subnets: tuple[str, ...]


class DiskClass(ResolvedModel):
    """The VolumeAttributesClass a disk's limits come from (not in the XML: status reports it)."""

    disk: AliasName
    volume_attributes_class: KubeName | None


class PublicAddress(ResolvedModel):
    """A NIC's public address from its network's pool (not in the XML: a claim in the API server
    holds it, and the guest learns it from a DHCP reservation or from network-data)."""

    interface: AliasName
    network: KubeName = Field(description="the LibvirtNetwork whose pool it comes from")
    mac: Mac
    pool: AddressPool
    address: str | None = Field(description="None until the machine holds one")
    reservation: SafeName | None = Field(
        description="the libvirt network whose DHCP reserves it for the MAC; None: network-data"
    )
    in_pool: bool = Field(
        default=True, description="False once the pool was shrunk past the held address"
    )


class ResolvedMachine(ResolvedModel):
    domain: DomainSpec
    volumes: tuple[VolumePlan, ...]
    cloud_init: CloudInitData | None = None
    autostart: bool = False
    shutdown_timeout_seconds: int = Field(ge=1)
    nic_subnets: tuple[NicSubnets, ...] = ()
    """The NICs whose network names its subnets; the others believe any global address."""
    disk_classes: tuple[DiskClass, ...] = ()
    """Each disk's VolumeAttributesClass, boot disk first, as the VM names it."""
    public_addresses: tuple[PublicAddress, ...] = ()
    """The NICs that asked for a public address on a network with a pool."""
    spot: bool = False
    """`scheduling.spot`: it runs on capacity the placer may reclaim (docs/placement.md)."""
