"""The vm-api.io/v1alpha1 VirtualMachine API as pydantic models: the one source of its schema.

The CRD in `crds/` is generated from these models (`python -m generic.crd`), so a field, its
description (the attribute docstring), its default and its limits are written once. Validation that
the API server must do itself (immutability, grow-only sizes, exactly-one-of) travels to the CRD as
CEL rules in `json_schema_extra`; the same rules are checked here where a single object suffices,
so a provider parsing a VM and the API server agree on what is valid.

Field names are snake_case in Python and camelCase on the wire (aliases); parse with
`VirtualMachineSpec.model_validate(obj["spec"])` and dump with `by_alias=True`.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

from generic import constants as c

__all__ = [
    "Address",
    "BootDisk",
    "BootDiskSource",
    "Bootstrap",
    "CloudInit",
    "Condition",
    "Disk",
    "DiskSource",
    "InstanceType",
    "Interface",
    "Network",
    "ObjectMeta",
    "ObjectReference",
    "PowerOffMode",
    "PowerState",
    "Quantity",
    "Resources",
    "Scheduling",
    "SecretKeySelector",
    "VirtualMachine",
    "VirtualMachineSpec",
    "VirtualMachineStatus",
    "parse_quantity",
]


def _cel(rule: str, message: str) -> dict[str, str]:
    return {"rule": rule, "message": message}


def _validations(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


def _list_map(*keys: str) -> dict[str, Any]:
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


_IMMUTABLE = "self == oldSelf"

_QUANTITY_RE = re.compile(c.QUANTITY_PATTERN)
_SUFFIX = {
    "": 1,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": 10**-9,
    "u": 10**-6,
    "m": 10**-3,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


def parse_quantity(value: int | str) -> float:
    """The numeric value of a Kubernetes quantity (`512Mi` -> 536870912.0)."""
    if isinstance(value, int):
        return float(value)
    if len(value) > c.QUANTITY_MAX_LENGTH or not _QUANTITY_RE.match(value):
        raise ValueError(f"{value[: c.QUANTITY_MAX_LENGTH]!r} is not a Kubernetes quantity")
    number = re.match(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?(\d+(\.\d*)?|\.\d+))?", value)
    assert number is not None  # the full pattern matched
    digits = number.group(0)
    suffix = value[len(digits) :]
    return float(digits) * _SUFFIX[suffix]


def _check_quantity(value: int | str) -> int | str:
    if parse_quantity(value) <= 0:
        raise ValueError(f"{value!r} must be greater than zero")
    return value


Quantity = Annotated[
    StrictInt | StrictStr,
    AfterValidator(_check_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": c.QUANTITY_PATTERN,
            "maxLength": c.QUANTITY_MAX_LENGTH,
            "x-kubernetes-int-or-string": True,
            **_validations(
                _cel(
                    "type(self) == int ? self > 0 : "
                    "quantity(string(self)).isGreaterThan(quantity('0'))",
                    "must be greater than zero",
                )
            ),
        }
    ),
]
"""A positive Kubernetes resource quantity: an integer or a string such as `4Gi`."""


def _check_ip(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a bare IP address (no prefix length)") from None
    return value


BareIP = Annotated[
    str,
    AfterValidator(_check_ip),
    Field(max_length=45, json_schema_extra=_validations(_cel("isIP(self)", "must be an IP"))),
]

DnsSubdomain = Annotated[str, Field(min_length=1, max_length=253, pattern=c.DNS_SUBDOMAIN_PATTERN)]
DnsLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=c.DNS_LABEL_PATTERN)]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
        extra="ignore",
        frozen=True,
    )


class ObjectReference(_Model):
    """A reference to an object by API group, kind and name, in the VM's own namespace."""

    api_group: DnsSubdomain
    """API group of the referenced object, for example `catalog.vm-api.io`."""
    kind: str = Field(min_length=1, max_length=63, pattern=c.KIND_PATTERN)
    """Kind of the referenced object, for example `Image`."""
    name: DnsSubdomain
    """Name of the referenced object. Raw image strings such as `debian:12` are not names: name
    images through a catalog object."""


class InfrastructureReference(ObjectReference):
    """The provider object that realises this VM: same namespace, version found by discovery.

    The provider object must carry the annotation `vm-api.io/virtual-machine: <this VM's name>`.
    Immutable once set."""


class Resources(_Model):
    """Explicit sizing of a VM."""

    cpus: int = Field(ge=1)
    """Number of virtual CPUs."""
    memory: Quantity
    """Memory, as a Kubernetes quantity such as `4Gi`."""


class InstanceType(_Model):
    """The size of a VM: exactly one of a named sizing profile or explicit resources."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel("has(self.name) != has(self.resources)", "set exactly one of name or resources")
        )
    )

    name: DnsSubdomain | None = None
    """Name of a sizing profile that the provider resolves."""
    resources: Resources | None = None
    """Explicit CPU and memory."""

    @model_validator(mode="after")
    def _exactly_one(self) -> InstanceType:
        if (self.name is None) == (self.resources is None):
            raise ValueError("set exactly one of name or resources")
        return self


class BootDiskSource(_Model):
    """Where a boot disk's content comes from: exactly one of an image or a snapshot."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel("has(self.image) != has(self.snapshot)", "set exactly one of image or snapshot")
        )
    )

    image: ObjectReference | None = None
    """An image, named through a catalog object."""
    snapshot: ObjectReference | None = None
    """A snapshot to restore."""

    @model_validator(mode="after")
    def _exactly_one(self) -> BootDiskSource:
        if (self.image is None) == (self.snapshot is None):
            raise ValueError("set exactly one of image or snapshot")
        return self


class DiskSource(_Model):
    """Where a data disk's content comes from: exactly one of an image, a snapshot or blank."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            _cel(
                "[has(self.image), has(self.snapshot), has(self.blank)].filter(x, x).size() == 1",
                "set exactly one of image, snapshot or blank",
            )
        )
    )

    image: ObjectReference | None = None
    """An image, named through a catalog object."""
    snapshot: ObjectReference | None = None
    """A snapshot to restore."""
    blank: Literal[True] | None = None
    """An empty disk (`true` is the only value)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> DiskSource:
        if sum(x is not None for x in (self.image, self.snapshot, self.blank)) != 1:
            raise ValueError("set exactly one of image, snapshot or blank")
        return self


_STORAGE_CLASS_IMMUTABLE = _cel(
    "(has(self.storageClassName) ? self.storageClassName : '') == "
    "(has(oldSelf.storageClassName) ? oldSelf.storageClassName : '')",
    "storageClassName is immutable",
)
_SOURCE_DESCRIPTION = "What the disk is made from. Immutable."
_SIZE_DESCRIPTION = "Size in GiB. It may grow, never shrink."


class BootDisk(_Model):
    """The disk the VM boots from."""

    model_config = ConfigDict(json_schema_extra=_validations(_STORAGE_CLASS_IMMUTABLE))

    source: BootDiskSource = Field(
        description=_SOURCE_DESCRIPTION,
        json_schema_extra=_validations(_cel(_IMMUTABLE, "source is immutable")),
    )
    size_gi_b: int = Field(
        alias="sizeGiB",
        ge=1,
        description=_SIZE_DESCRIPTION,
        json_schema_extra=_validations(_cel("self >= oldSelf", "sizeGiB may only grow")),
    )
    storage_class_name: DnsSubdomain | None = None
    """Storage class the provider places the disk in; the provider's default when absent.
    Immutable."""
    volume_attributes_class_name: DnsSubdomain | None = None
    """Volume attributes class (performance tier) the provider applies, if it supports one."""
    delete_on_termination: bool = True
    """Delete the disk when the VM is deleted."""


class Disk(_Model):
    """An additional data disk."""

    model_config = ConfigDict(json_schema_extra=_validations(_STORAGE_CLASS_IMMUTABLE))

    name: DnsLabel
    """Name of the disk, unique within the VM."""
    source: DiskSource = Field(
        description=_SOURCE_DESCRIPTION,
        json_schema_extra=_validations(_cel(_IMMUTABLE, "source is immutable")),
    )
    size_gi_b: int = Field(
        alias="sizeGiB",
        ge=1,
        description=_SIZE_DESCRIPTION,
        json_schema_extra=_validations(_cel("self >= oldSelf", "sizeGiB may only grow")),
    )
    storage_class_name: DnsSubdomain | None = None
    """Storage class the provider places the disk in; the provider's default when absent.
    Immutable."""
    volume_attributes_class_name: DnsSubdomain | None = None
    """Volume attributes class (performance tier) the provider applies, if it supports one."""
    delete_on_termination: bool = True
    """Delete the disk when the VM is deleted."""


class Interface(_Model):
    """A network interface of the VM."""

    name: DnsLabel
    """Name of the interface, unique within the VM."""
    network: ObjectReference | None = None
    """The network to attach to, named through a catalog object; the provider's default network
    when absent."""
    addresses: list[BareIP] | None = Field(default=None, max_length=16)
    """Static addresses, as bare IPs without a prefix length."""
    dhcp4: bool | None = None
    """Use DHCP for IPv4. When unset: true unless a static IPv4 address is given."""
    dhcp6: bool | None = None
    """Use DHCPv6."""
    public_ip: bool | None = Field(default=None, alias="publicIP")
    """Ask the provider for a public address, where it has such a thing."""

    def wants_dhcp4(self) -> bool:
        """The effective dhcp4 setting, applying the documented default."""
        if self.dhcp4 is not None:
            return self.dhcp4
        return not any(ipaddress.ip_address(a).version == 4 for a in self.addresses or ())


class Network(_Model):
    """Network settings of the VM."""

    host_name: DnsSubdomain | None = None
    """Host name of the guest. Immutable."""
    nameservers: list[BareIP] | None = Field(default=None, max_length=3)
    """DNS servers, as bare IPs."""
    search_domains: list[DnsSubdomain] | None = Field(default=None, max_length=6)
    """DNS search domains."""
    interfaces: list[Interface] | None = Field(
        default=None, max_length=10, json_schema_extra=_list_map("name")
    )
    """Network interfaces; none means one interface on the provider's default network."""

    @model_validator(mode="after")
    def _unique_interfaces(self) -> Network:
        _require_unique([i.name for i in self.interfaces or ()], "interface")
        return self


class SecretKeySelector(_Model):
    """A key of a Secret in the VM's namespace."""

    name: DnsSubdomain
    """Name of the Secret."""
    key: str = Field(min_length=1, max_length=253, pattern=c.SECRET_KEY_PATTERN)
    """Key within the Secret."""


class CloudInit(_Model):
    """cloud-init data, always read from Secrets and never given inline."""

    user_data: SecretKeySelector | None = None
    """Secret key holding the user-data."""
    network_data: SecretKeySelector | None = None
    """Secret key holding the network-config."""


class Bootstrap(_Model):
    """How the guest receives its first-boot configuration."""

    cloud_init: CloudInit | None = None
    """cloud-init (NoCloud) data."""


class Scheduling(_Model):
    """Placement hints for the provider."""

    spot: bool | None = None
    """Run on reclaimable (spot/preemptible) capacity where the provider offers it."""


def _require_unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{what} name {name!r} appears twice")
        seen.add(name)


_HOSTNAME_IMMUTABLE = _cel(
    "(has(self.network) && has(self.network.hostName) ? self.network.hostName : '') == "
    "(has(oldSelf.network) && has(oldSelf.network.hostName) ? oldSelf.network.hostName : '')",
    "network.hostName is immutable",
)
_BOOT_DISK_FIXED = _cel(
    "has(self.bootDisk) == has(oldSelf.bootDisk)", "bootDisk cannot be added or removed"
)


PowerState = Literal["PoweredOn", "PoweredOff", "Suspended"]
"""A VM's desired power state (`spec.powerState`)."""
PowerOffMode = Literal["Hard", "Soft", "TrySoft"]
"""How a VM is powered off (`spec.powerOffMode`)."""


class VirtualMachineSpec(_Model):
    """The portable intent: what machine the user wants, independent of the platform."""

    model_config = ConfigDict(json_schema_extra=_validations(_HOSTNAME_IMMUTABLE, _BOOT_DISK_FIXED))

    infrastructure_ref: InfrastructureReference = Field(
        json_schema_extra=_validations(_cel(_IMMUTABLE, "infrastructureRef is immutable"))
    )
    """The provider object that realises this VM."""
    power_state: PowerState = c.POWERED_ON
    """Desired power state."""
    power_off_mode: PowerOffMode = c.POWER_OFF_TRY_SOFT
    """How to power off: Hard turns the machine off without involving the guest; Soft asks the
    guest and fails if it does not comply; TrySoft asks, then forces after a timeout."""
    instance_type: InstanceType | None = None
    """The size of the VM."""
    boot_disk: BootDisk | None = None
    """The disk the VM boots from."""
    disks: list[Disk] | None = Field(
        default=None, max_length=60, json_schema_extra=_list_map("name")
    )
    """Additional data disks, keyed by name."""
    network: Network | None = None
    """Network settings."""
    bootstrap: Bootstrap | None = None
    """First-boot configuration of the guest."""
    ssh_public_keys: list[Annotated[str, Field(min_length=1, max_length=16384)]] | None = Field(
        default=None, max_length=100
    )
    """SSH public keys to authorise in the guest, delivered through cloud-init."""
    failure_domain: str | None = Field(default=None, min_length=1, max_length=253)
    """Failure domain (zone, rack, host group); opaque here, interpreted by the provider."""
    scheduling: Scheduling | None = None
    """Placement hints."""
    tags: dict[str, Annotated[str, Field(max_length=256)]] | None = Field(
        default=None,
        max_length=50,
        json_schema_extra=_validations(
            _cel("self.all(k, size(k) >= 1 && size(k) <= 128)", "tag keys are 1-128 characters")
        ),
    )
    """Free-form key/value tags that the provider passes on to the platform where it can."""

    @model_validator(mode="after")
    def _unique_disks(self) -> VirtualMachineSpec:
        _require_unique([d.name for d in self.disks or ()], "disk")
        if self.tags is not None and any(not 1 <= len(k) <= 128 for k in self.tags):
            raise ValueError("tag keys are 1-128 characters")
        return self


class Condition(_Model):
    """A standard Kubernetes condition (metav1.Condition)."""

    type: str = Field(max_length=316, pattern=c.CONDITION_TYPE_PATTERN)
    """Type of the condition: Ready, InfrastructureReady or UpToDate."""
    status: Literal["True", "False", "Unknown"]
    """Status of the condition."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The VM generation the condition was computed for."""
    last_transition_time: str = Field(json_schema_extra={"format": "date-time"})
    """When the status last changed."""
    reason: str = Field(min_length=1, max_length=1024, pattern=c.CONDITION_REASON_PATTERN)
    """Machine-readable reason in CamelCase."""
    message: str = Field(max_length=c.CONDITION_MESSAGE_MAX)
    """Human-readable details."""


class Address(_Model):
    """An address of the machine, as the provider reports it."""

    type: Literal["InternalIP", "ExternalIP", "InternalDNS", "ExternalDNS"]
    """Kind of address."""
    address: str = Field(min_length=1, max_length=c.ADDRESS_MAX)
    """The address."""
    interface: str | None = Field(default=None, max_length=c.ADDRESS_MAX)
    """The interface it belongs to, if the provider knows."""


class VirtualMachineStatus(_Model):
    """The observed state, written only by the generic controller from the provider's status."""

    ready: bool | None = None
    """True when the provider reports the machine's infrastructure ready."""
    power_state: str | None = Field(default=None, max_length=c.POWER_STATE_MAX)
    """Power state the provider observed; absent while it is transitioning."""
    provider_id: str | None = Field(default=None, alias="providerID", max_length=c.PROVIDER_ID_MAX)
    """Stable identifier of the machine on its platform."""
    addresses: list[Address] | None = Field(default=None, max_length=c.ADDRESSES_MAX)
    """Addresses of the machine, as last reported by the provider."""
    failure_reason: str | None = Field(default=None, max_length=1024)
    """Set when the provider reports a terminal error that needs a human; cleared on recovery."""
    failure_message: str | None = Field(default=None, max_length=c.CONDITION_MESSAGE_MAX)
    """Details of failureReason."""
    conditions: list[Condition] | None = Field(
        default=None, max_length=16, json_schema_extra=_list_map("type")
    )
    """Ready, InfrastructureReady and UpToDate."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The VM generation this status was computed for."""
    provider_metadata: (
        dict[str, Annotated[str, Field(max_length=c.PROVIDER_METADATA_VALUE_MAX)]] | None
    ) = Field(default=None, max_length=c.PROVIDER_METADATA_ENTRIES_MAX)
    """Provider-specific key/value facts, copied from the provider object's status."""


class ObjectMeta(_Model):
    """The parts of metadata that consumers of a parsed VM need; the rest is ignored."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    generation: int | None = None
    resource_version: str | None = None
    annotations: dict[str, str] | None = None
    labels: dict[str, str] | None = None


class VirtualMachine(_Model):
    """A whole VirtualMachine object as read from the API server (for providers parsing it)."""

    api_version: str = c.API_VERSION
    kind: str = c.KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: VirtualMachineSpec
    status: VirtualMachineStatus | None = None
