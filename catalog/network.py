"""`LibvirtNetwork`: what a VM interface's `network` reference means on a host.

One of a libvirt-managed network, an existing Linux bridge, or a macvtap (`direct`) attachment to a
host device; the NIC model; which address source to trust when reporting the guest's IPs; and the
prefix lengths used to turn bare static addresses into cloud-init network configuration. It creates
no bridge and no libvirt network: those belong to the host's setup.
"""

from __future__ import annotations

import enum
import ipaddress
from typing import Self

from pydantic import Field, field_validator, model_validator

from catalog.base import KubeModel, ObjectMeta, VolumeName
from catalog.image import NicModel

__all__ = [
    "AddressSourcePolicy",
    "DirectMode",
    "DirectSource",
    "LibvirtNetwork",
    "LibvirtNetworkSpec",
    "NetworkSource",
    "StaticAddressing",
]


class DirectMode(enum.StrEnum):
    """macvtap modes. `bridge` lets guests on one device talk to each other (not to the host)."""

    BRIDGE = "bridge"
    VEPA = "vepa"
    PRIVATE = "private"
    PASSTHROUGH = "passthrough"


class AddressSourcePolicy(enum.StrEnum):
    """Where reported addresses come from: DHCP leases of a libvirt network, the guest agent,
    the host's ARP table, or any of them (lease, then agent, then ARP)."""

    LEASE = "Lease"
    AGENT = "Agent"
    ARP = "ARP"
    ANY = "Any"


class DirectSource(KubeModel):
    device: VolumeName = Field(description="Host network device to attach a macvtap to.")
    mode: DirectMode = Field(default=DirectMode.BRIDGE, description="macvtap mode.")


class NetworkSource(KubeModel):
    """Exactly one of `network`, `bridge` or `direct`."""

    model_config = KubeModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "[has(self.network), has(self.bridge), has(self.direct)]"
                    ".filter(x, x).size() == 1",
                    "message": "exactly one of network, bridge or direct must be set",
                }
            ]
        }
    }

    network: VolumeName | None = Field(default=None, description="A libvirt network's name.")
    bridge: VolumeName | None = Field(default=None, description="An existing Linux bridge.")
    direct: DirectSource | None = Field(default=None, description="A macvtap attachment.")

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        chosen = [self.network is not None, self.bridge is not None, self.direct is not None]
        if chosen.count(True) != 1:
            raise ValueError("exactly one of network, bridge or direct must be set")
        return self


class StaticAddressing(KubeModel):
    """Prefix lengths and gateways for interfaces that ask for static addresses."""

    ipv4_prefix_length: int = Field(default=24, ge=1, le=32, description="IPv4 prefix length.")
    ipv4_gateway: str | None = Field(default=None, description="IPv4 default gateway.")
    ipv6_prefix_length: int = Field(default=64, ge=1, le=128, description="IPv6 prefix length.")
    ipv6_gateway: str | None = Field(default=None, description="IPv6 default gateway.")

    @field_validator("ipv4_gateway")
    @classmethod
    def _v4(cls, value: str | None) -> str | None:
        try:
            return None if value is None else str(ipaddress.IPv4Address(value))
        except ValueError:
            raise ValueError("ipv4Gateway must be a bare IPv4 address") from None

    @field_validator("ipv6_gateway")
    @classmethod
    def _v6(cls, value: str | None) -> str | None:
        try:
            return None if value is None else str(ipaddress.IPv6Address(value))
        except ValueError:
            raise ValueError("ipv6Gateway must be a bare IPv6 address") from None


class LibvirtNetworkSpec(KubeModel):
    """The host-side attachment of a NIC, its model, and how to learn the guest's addresses."""

    source: NetworkSource = Field(description="What the NIC attaches to on the host.")
    nic_model: NicModel | None = Field(
        default=None, description="NIC model; unset means the image's hint."
    )
    address_source: AddressSourcePolicy | None = Field(
        default=None,
        description="Address source to trust; unset means Lease for libvirt networks, else Any.",
    )
    static_addressing: StaticAddressing = Field(
        default_factory=StaticAddressing, description="Used for interfaces with static addresses."
    )
    default: bool = Field(
        default=False,
        description="Use this network for VMs that declare no interfaces (at most one default).",
    )
    subnets: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="The network's subnets (CIDR, e.g. 10.0.0.0/24, fd00::/64). An address the "
        "guest agent or the host's ARP table reports for a NIC on this network is believed only "
        "inside them (the guest controls both); unset: any global address.",
    )

    @field_validator("subnets")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        try:
            return [str(ipaddress.ip_network(text, strict=False)) for text in value]
        except ValueError:
            raise ValueError("each subnet is a CIDR, e.g. 10.0.0.0/24 or fd00::/64") from None

    def effective_address_source(self) -> AddressSourcePolicy:
        if self.address_source is not None:
            return self.address_source
        if self.source.network is not None:
            return AddressSourcePolicy.LEASE
        return AddressSourcePolicy.ANY


class LibvirtNetwork(KubeModel):
    metadata: ObjectMeta
    spec: LibvirtNetworkSpec
