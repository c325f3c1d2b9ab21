"""`LibvirtNetwork`: what a VM interface's `network` reference means on a host.

One of a libvirt-managed network, an existing Linux bridge, or a macvtap (`direct`) attachment to a
host device; the NIC model; which address source to trust when reporting the guest's IPs; and the
prefix lengths used to turn bare static addresses into cloud-init network configuration; and, when
the admin declares one, a pool of externally reachable addresses handed out to interfaces that ask
for `publicIP` (what "externally reachable" means on the network, routed or bridged, is the
admin's to arrange). It creates no bridge, no libvirt network and no route: those belong to the
host's setup.
"""

from __future__ import annotations

import enum
import ipaddress
import itertools
from typing import Self

from pydantic import Field, field_validator, model_validator

from catalog.base import KubeModel, ObjectMeta, VolumeName
from catalog.image import NicModel

__all__ = [
    "MAX_POOL_ADDRESSES",
    "AddressPool",
    "AddressRange",
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


# A pool is searched address by address for a free one: this bounds that walk (and is far more
# public addresses than one network hands out).
MAX_POOL_ADDRESSES = 65536


class AddressRange(KubeModel):
    """Addresses `start` to `end`, both included, of one family."""

    model_config = KubeModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "isIP(self.start) && isIP(self.end) && "
                    "ip(self.start).family() == ip(self.end).family()",
                    "message": "start and end are bare IP addresses of one family",
                }
            ]
        }
    }

    start: str = Field(max_length=45, description="First address of the range (a bare IP).")
    end: str = Field(
        max_length=45, description="Last address of the range (a bare IP), at or after start."
    )

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        try:
            first, last = ipaddress.ip_address(self.start), ipaddress.ip_address(self.end)
        except ValueError:
            raise ValueError("start and end are bare IP addresses") from None
        if first.version != last.version:
            raise ValueError("start and end are of one address family")
        if int(last) < int(first):
            raise ValueError(f"end {last} comes before start {first}")
        return self

    @property
    def version(self) -> int:
        return ipaddress.ip_address(self.start).version

    def span(self) -> tuple[int, int]:
        """The first and last address, as integers."""
        return int(ipaddress.ip_address(self.start)), int(ipaddress.ip_address(self.end))

    def size(self) -> int:
        first, last = self.span()
        return last - first + 1


class AddressPool(KubeModel):
    """Externally reachable addresses for interfaces with `publicIP: true`: each one is claimed
    for one machine at a time, cluster-wide, and configured in its guest with this prefix length
    and gateway."""

    ranges: list[AddressRange] = Field(
        min_length=1, max_length=16, description="The pool's address ranges (one family)."
    )
    prefix_length: int = Field(
        ge=1, le=128, description="Prefix length of the addresses on the network (e.g. 24)."
    )
    gateway: str | None = Field(
        default=None,
        max_length=45,
        description="Default gateway for the addresses (a bare IP); unset: none.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        families = {r.version for r in self.ranges}
        if len(families) != 1:
            raise ValueError("every range of a pool is of one address family")
        family = families.pop()
        if self.prefix_length > (32 if family == 4 else 128):
            raise ValueError(f"prefixLength {self.prefix_length} is too long for IPv{family}")
        if self.gateway is not None:
            try:
                gateway = ipaddress.ip_address(self.gateway)
            except ValueError:
                raise ValueError("gateway is a bare IP address") from None
            if gateway.version != family:
                raise ValueError("gateway is of the pool's address family")
            if any(r.span()[0] <= int(gateway) <= r.span()[1] for r in self.ranges):
                raise ValueError(f"gateway {gateway} lies inside the pool")
        ordered = sorted(self.ranges, key=lambda r: r.span()[0])
        for before, after in itertools.pairwise(ordered):
            if after.span()[0] <= before.span()[1]:
                raise ValueError(
                    f"ranges {before.start}-{before.end} and {after.start}-{after.end} overlap"
                )
        if sum(r.size() for r in self.ranges) > MAX_POOL_ADDRESSES:
            raise ValueError(f"a pool holds at most {MAX_POOL_ADDRESSES} addresses")
        return self

    @property
    def version(self) -> int:
        return self.ranges[0].version

    def size(self) -> int:
        return sum(r.size() for r in self.ranges)


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
    address_pool: AddressPool | None = Field(
        default=None,
        description="Externally reachable addresses for interfaces with publicIP: true; unset: "
        "publicIP is not supported on this network.",
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
