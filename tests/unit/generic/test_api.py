"""The models accept what the API accepts and refuse what can never be valid."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from generic import constants as c
from generic.api import (
    Disk,
    InstanceType,
    Interface,
    VirtualMachineSpec,
    VirtualMachineStatus,
    parse_quantity,
)
from tests.support.allocation import ALLOCATION_LIMIT, allocating_at_most

REF = {"apiGroup": "libvirt.vm-api.io", "kind": "LibvirtMachine", "name": "web-1"}
IMAGE = {"apiGroup": "catalog.vm-api.io", "kind": "Image", "name": "debian-12"}


def _spec(**extra: Any) -> dict[str, Any]:
    return {"infrastructureRef": REF, **extra}


def test_minimal_spec_gets_defaults() -> None:
    spec = VirtualMachineSpec.model_validate(_spec())
    assert spec.power_state == "PoweredOn"
    assert spec.power_off_mode == "TrySoft"
    assert spec.infrastructure_ref.kind == "LibvirtMachine"


def test_full_spec_round_trips_with_wire_names() -> None:
    wire = _spec(
        powerState="PoweredOff",
        powerOffMode="Hard",
        instanceType={"resources": {"cpus": 2, "memory": "4Gi"}},
        bootDisk={"source": {"image": IMAGE}, "sizeGiB": 10, "storageClassName": "fast"},
        disks=[{"name": "data", "source": {"blank": True}, "sizeGiB": 5}],
        network={
            "hostName": "web-1",
            "nameservers": ["10.0.0.1"],
            "searchDomains": ["example.org"],
            "interfaces": [{"name": "eth0", "addresses": ["10.0.0.5"], "publicIP": False}],
        },
        bootstrap={"cloudInit": {"userData": {"name": "web-1-init", "key": "user-data"}}},
        sshPublicKeys=["ssh-ed25519 AAAA test"],
        failureDomain="rack-1",
        scheduling={"spot": True},
        tags={"team": "web"},
    )
    spec = VirtualMachineSpec.model_validate(wire)
    dumped = spec.model_dump(by_alias=True, exclude_none=True)
    assert dumped["bootDisk"]["sizeGiB"] == 10
    assert dumped["bootDisk"]["deleteOnTermination"] is True
    assert dumped["network"]["interfaces"][0]["publicIP"] is False
    assert VirtualMachineSpec.model_validate(dumped) == spec


@pytest.mark.parametrize(
    "ref",
    [
        {**REF, "name": "debian:12"},
        {**REF, "name": "registry.example/debian"},
        {**REF, "name": "Upper"},
        {**REF, "kind": "1Machine"},
        {**REF, "kind": ""},
        {**REF, "apiGroup": "Not_A_Group"},
        {**REF, "name": "a" * 254},
        {"apiGroup": "x.io", "kind": "K"},
    ],
)
def test_malformed_references_are_refused(ref: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        VirtualMachineSpec.model_validate(_spec(infrastructureRef=ref))


@pytest.mark.parametrize(
    "instance_type",
    [{}, {"name": "small", "resources": {"cpus": 1, "memory": "1Gi"}}],
)
def test_instance_type_is_exactly_one_of(instance_type: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        InstanceType.model_validate(instance_type)


@pytest.mark.parametrize("memory", ["0", 0, "-1Gi", "lots", True])
def test_memory_must_be_a_positive_quantity(memory: object) -> None:
    with pytest.raises(ValidationError):
        InstanceType.model_validate({"resources": {"cpus": 1, "memory": memory}})


def test_quantities_parse() -> None:
    assert parse_quantity("512Mi") == 512 * 2**20
    assert parse_quantity("1G") == 10**9
    assert parse_quantity("1.5Gi") == 1.5 * 2**30
    assert parse_quantity("100m") == pytest.approx(0.1)
    assert parse_quantity("1e3") == 1000
    assert parse_quantity(7) == 7


def test_boot_disk_cannot_be_blank() -> None:
    with pytest.raises(ValidationError):
        VirtualMachineSpec.model_validate(_spec(bootDisk={"source": {}, "sizeGiB": 1}))
    with pytest.raises(ValidationError):
        VirtualMachineSpec.model_validate(
            _spec(bootDisk={"source": {"image": IMAGE, "snapshot": IMAGE}, "sizeGiB": 1})
        )


@pytest.mark.parametrize(
    "source", [{}, {"blank": True, "image": IMAGE}, {"blank": False}, {"image": IMAGE}]
)
def test_data_disk_source_is_exactly_one_of(source: dict[str, Any]) -> None:
    disk = {"name": "d", "source": source, "sizeGiB": 1}
    if source == {"image": IMAGE}:
        assert Disk.model_validate(disk).source.image is not None
        return
    with pytest.raises(ValidationError):
        Disk.model_validate(disk)


def test_list_map_keys_are_unique() -> None:
    disk = {"name": "d", "source": {"blank": True}, "sizeGiB": 1}
    with pytest.raises(ValidationError, match="twice"):
        VirtualMachineSpec.model_validate(_spec(disks=[disk, disk]))
    with pytest.raises(ValidationError, match="twice"):
        VirtualMachineSpec.model_validate(
            _spec(network={"interfaces": [{"name": "a"}, {"name": "a"}]})
        )


def test_limits() -> None:
    disk = {"source": {"blank": True}, "sizeGiB": 1}
    with pytest.raises(ValidationError):
        VirtualMachineSpec.model_validate(
            _spec(disks=[{**disk, "name": f"d{i}"} for i in range(61)])
        )
    with pytest.raises(ValidationError):
        VirtualMachineSpec.model_validate(_spec(tags={f"k{i}": "v" for i in range(51)}))
    with pytest.raises(ValidationError):
        VirtualMachineSpec.model_validate(_spec(network={"nameservers": ["1.1.1.1"] * 4}))
    with pytest.raises(ValidationError):
        VirtualMachineSpec.model_validate(_spec(tags={"": "empty key"}))
    with pytest.raises(ValidationError):
        VirtualMachineSpec.model_validate(_spec(bootDisk={**disk, "sizeGiB": 0}))


@pytest.mark.parametrize("address", ["10.0.0.1/24", "host.example", ""])
def test_interface_addresses_are_bare_ips(address: str) -> None:
    with pytest.raises(ValidationError):
        Interface.model_validate({"name": "eth0", "addresses": [address]})


def test_dhcp4_defaults_to_true_without_a_static_ipv4() -> None:
    assert Interface.model_validate({"name": "e"}).wants_dhcp4()
    assert Interface.model_validate({"name": "e", "addresses": ["fd00::5"]}).wants_dhcp4()
    assert not Interface.model_validate({"name": "e", "addresses": ["10.0.0.5"]}).wants_dhcp4()
    explicit = {"name": "e", "addresses": ["10.0.0.5"], "dhcp4": True}
    assert Interface.model_validate(explicit).wants_dhcp4()


def test_status_uses_wire_names() -> None:
    status = VirtualMachineStatus.model_validate(
        {"providerID": "libvirt://h/u", "addresses": [{"type": "InternalIP", "address": "x"}]}
    )
    assert status.provider_id == "libvirt://h/u"
    with pytest.raises(ValidationError):
        VirtualMachineStatus.model_validate({"addresses": [{"type": "Bogus", "address": "x"}]})


@pytest.mark.parametrize("text", ["1e200000", "1e999", "1e" + "9" * 62, "1" * 65])
def test_a_quantity_with_a_huge_exponent_or_length_is_refused_at_once(text: str) -> None:
    with (
        allocating_at_most(ALLOCATION_LIMIT),
        pytest.raises(ValueError, match="not a Kubernetes quantity"),
    ):
        parse_quantity(text)
    assert not re.match(c.QUANTITY_PATTERN, text) or len(text) > c.QUANTITY_MAX_LENGTH


@pytest.mark.parametrize("text", ["512Mi", "1e9", "1E+18", "2Gi", "0.5Gi", "100M"])
def test_ordinary_quantities_still_parse(text: str) -> None:
    assert parse_quantity(text) > 0
