"""`LibvirtImage`: where a boot or data disk's base image comes from, and how to boot it.

A generic VM names an image only through this catalog kind, never by a raw string such as
`debian:12`. The image object says where the bytes are (an http(s) URL with a mandatory sha256, or
a volume that already sits in a pool), their format, the firmware they boot with and guest hints.
It never downloads anything itself: importing is the controller's job, reported per host in status.
"""

from __future__ import annotations

import enum
from typing import Annotated, Self

from pydantic import AnyUrl, Field, UrlConstraints, field_validator, model_validator

from catalog.base import KubeModel, ObjectMeta, VolumeName

__all__ = [
    "CdromBus",
    "DiskBus",
    "Firmware",
    "FirmwareType",
    "GuestHints",
    "HttpSource",
    "ImageFormat",
    "ImageHostStatus",
    "ImagePhase",
    "ImageSource",
    "LibvirtImage",
    "LibvirtImageSpec",
    "LibvirtImageStatus",
    "NicModel",
    "PoolVolume",
]

HttpUrl = Annotated[AnyUrl, UrlConstraints(allowed_schemes=["http", "https"], max_length=2048)]

# A machine type libvirt's qemu driver understands for x86: the `pc` (i440fx) and `q35` families,
# plain or versioned. Anything else would fail at define time with a less helpful message.
MACHINE_TYPE_PATTERN = r"^(pc|q35|pc-i440fx-[0-9]+\.[0-9]+|pc-q35-[0-9]+\.[0-9]+)$"
# The download cap by default: distribution cloud images are well under 2 GiB and the largest
# common guest images (Windows) around 20; a larger image is an explicit choice on its LibvirtImage.
DEFAULT_MAX_IMAGE_GIB = 20
MAX_IMAGE_GIB = 4096


class ImageFormat(enum.StrEnum):
    QCOW2 = "qcow2"
    RAW = "raw"


class FirmwareType(enum.StrEnum):
    BIOS = "BIOS"
    UEFI = "UEFI"


class DiskBus(enum.StrEnum):
    VIRTIO = "virtio"
    SCSI = "scsi"
    SATA = "sata"


class CdromBus(enum.StrEnum):
    """Bus of the cloud-init CD-ROM. `scsi` (virtio-scsi) works on both machine families and
    needs no AHCI driver in the guest; `ide` exists only on `pc`; `sata` needs AHCI in the guest."""

    SCSI = "scsi"
    SATA = "sata"
    IDE = "ide"


class NicModel(enum.StrEnum):
    VIRTIO = "virtio"
    E1000E = "e1000e"
    E1000 = "e1000"
    RTL8139 = "rtl8139"


class HttpSource(KubeModel):
    """An image served over http(s); the checksum is mandatory so a tampered or truncated download
    is never booted."""

    url: HttpUrl = Field(description="http or https URL of the image file.")
    sha256: str = Field(
        pattern=r"^[A-Fa-f0-9]{64}$",
        description="Expected SHA-256 of the file, 64 hex digits; verified before any use.",
    )
    max_size_gib: int = Field(
        default=DEFAULT_MAX_IMAGE_GIB,
        alias="maxSizeGiB",
        ge=1,
        le=MAX_IMAGE_GIB,
        description="Largest file accepted, in GiB: a server announcing more is refused before "
        "anything is written, and one sending more than it announced is cut off.",
    )

    @field_validator("sha256")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.lower()


class PoolVolume(KubeModel):
    """A volume that already exists in a libvirt storage pool on the host."""

    pool: VolumeName = Field(description="Name of the libvirt storage pool.")
    volume: VolumeName = Field(description="Name of the volume inside that pool.")


class ImageSource(KubeModel):
    """Exactly one of `http` or `volume`."""

    model_config = KubeModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.http) != has(self.volume)",
                    "message": "exactly one of http or volume must be set",
                }
            ]
        }
    }

    http: HttpSource | None = Field(
        default=None, description="Download from this URL, verified by its SHA-256."
    )
    volume: PoolVolume | None = Field(
        default=None, description="Use a volume already present in a pool on the host."
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.http is None) == (self.volume is None):
            raise ValueError("exactly one of http or volume must be set")
        return self


class Firmware(KubeModel):
    type: FirmwareType = Field(
        default=FirmwareType.BIOS, description="BIOS (SeaBIOS) or UEFI (OVMF, chosen by libvirt)."
    )
    secure_boot: bool = Field(
        default=False, description="Boot with UEFI Secure Boot and enrolled keys; needs UEFI, q35."
    )

    @model_validator(mode="after")
    def _secure_boot_needs_uefi(self) -> Self:
        if self.secure_boot and self.type is not FirmwareType.UEFI:
            raise ValueError("secureBoot requires firmware type UEFI")
        return self


class GuestHints(KubeModel):
    """What the guest OS in this image can drive. Defaults suit any modern Linux cloud image."""

    machine_type: str = Field(
        default="q35",
        pattern=MACHINE_TYPE_PATTERN,
        description="qemu machine type: pc, q35, or a versioned pc-i440fx-X.Y / pc-q35-X.Y.",
    )
    disk_bus: DiskBus = Field(default=DiskBus.VIRTIO, description="Bus for the machine's disks.")
    cdrom_bus: CdromBus = Field(
        default=CdromBus.SCSI,
        description="Bus for the cloud-init CD-ROM: scsi (virtio-scsi), sata or ide (pc only).",
    )
    nic_model: NicModel = Field(default=NicModel.VIRTIO, description="Default NIC model.")


class LibvirtImageSpec(KubeModel):
    """Where the image comes from, its format, the firmware it boots and hints about its guest."""

    source: ImageSource = Field(description="Where the image's bytes come from.")
    format: ImageFormat = Field(default=ImageFormat.QCOW2, description="qcow2 or raw.")
    firmware: Firmware = Field(default_factory=Firmware, description="Firmware the image boots.")
    guest: GuestHints = Field(
        default_factory=GuestHints, description="Guest hints: machine type, buses, NIC model."
    )


class ImagePhase(enum.StrEnum):
    PENDING = "Pending"
    IMPORTING = "Importing"
    READY = "Ready"
    FAILED = "Failed"


class ImageHostStatus(KubeModel):
    """Import state of the image on one host (images are imported per host, once per checksum)."""

    host: str = Field(description="Host the entry is about.")
    phase: ImagePhase = Field(description="Pending, Importing, Ready or Failed.")
    pool: str | None = Field(default=None, description="Pool holding the cached base volume.")
    volume: str | None = Field(default=None, description="Name of the cached base volume.")
    bytes_done: int | None = Field(default=None, ge=0, description="Bytes imported so far.")
    bytes_total: int | None = Field(default=None, ge=0, description="Size being imported.")
    message: str | None = Field(default=None, description="Why it failed, when it failed.")


class LibvirtImageStatus(KubeModel):
    """Import progress per host, written by the controllers that import the image."""

    hosts: list[ImageHostStatus] = Field(
        default_factory=list,
        description="Per-host import state; each host's daemon writes only its own entry.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["host"]},
    )


class LibvirtImage(KubeModel):
    metadata: ObjectMeta
    spec: LibvirtImageSpec
    status: LibvirtImageStatus | None = None
