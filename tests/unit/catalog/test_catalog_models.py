"""Catalog kinds: defaults that suit a modern guest, and refusals with readable messages."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from catalog.image import CdromBus, DiskBus, FirmwareType, LibvirtImageSpec, NicModel
from catalog.lookup import AmbiguousDefaultError, Catalog
from catalog.machineclass import LibvirtMachineClassSpec
from catalog.network import AddressSourcePolicy, LibvirtNetwork, LibvirtNetworkSpec
from catalog.quantity import MAX_BYTES, QuantityError, format_mebibytes, parse_quantity
from catalog.storage import LibvirtStorageClass, LibvirtStorageClassSpec
from tests.support.allocation import ALLOCATION_LIMIT, allocating_at_most

SHA = "0123456789abcdef" * 4


class TestQuantities:
    @pytest.mark.parametrize(
        ("text", "size"),
        [
            ("512Mi", 512 * 2**20),
            ("2Gi", 2 * 2**30),
            ("1.5Gi", 3 * 2**29),
            ("1G", 10**9),
            ("1e9", 10**9),
            ("128974848", 128974848),
            ("129M", 129 * 10**6),
            ("0", 0),
        ],
    )
    def test_kubernetes_spellings(self, text: str, size: int) -> None:
        assert parse_quantity(text) == size

    @pytest.mark.parametrize(
        ("text", "needle"),
        [
            ("12 apples", "not a Kubernetes quantity"),
            ("1.5", "whole number of bytes"),
            ("-1Gi", "negative"),
            ("100m", "not a Kubernetes quantity"),  # milli-bytes make no sense for memory
            ("x" * 1000, "not a Kubernetes quantity"),
        ],
    )
    def test_refusals_say_why(self, text: str, needle: str) -> None:
        with pytest.raises(QuantityError, match=needle):
            parse_quantity(text)

    @given(st.integers(min_value=1, max_value=2**50))
    def test_format_and_parse_round_trip(self, size: int) -> None:
        assert parse_quantity(format_mebibytes(size)) == size


class TestLibvirtImage:
    def test_defaults_suit_a_modern_cloud_image(self) -> None:
        spec = LibvirtImageSpec.model_validate(
            {"source": {"http": {"url": "https://x.example/i.qcow2", "sha256": SHA.upper()}}}
        )
        assert spec.format.value == "qcow2"
        assert spec.firmware.type is FirmwareType.BIOS
        assert spec.guest.machine_type == "q35"
        assert (spec.guest.disk_bus, spec.guest.cdrom_bus) == (DiskBus.VIRTIO, CdromBus.SCSI)
        assert spec.guest.nic_model is NicModel.VIRTIO
        assert spec.source.http is not None
        assert spec.source.http.sha256 == SHA  # normalised to lower case

    @pytest.mark.parametrize(
        ("source", "needle"),
        [
            ({"http": {"url": "https://x.example/i.qcow2"}}, "sha256"),
            ({"http": {"url": "https://x.example/i", "sha256": "abc"}}, "sha256"),
            ({"http": {"url": "ftp://x.example/i", "sha256": SHA}}, "URL scheme"),
            ({"http": {"url": "file:///etc/passwd", "sha256": SHA}}, "URL scheme"),
            ({}, "exactly one of http or volume"),
            (
                {
                    "http": {"url": "https://x.example/i", "sha256": SHA},
                    "volume": {"pool": "p", "volume": "v"},
                },
                "exactly one of http or volume",
            ),
            ({"volume": {"pool": "p", "volume": "../../etc/shadow"}}, "volume"),
            ({"volume": {"pool": "../p", "volume": "v"}}, "pool"),
            ({"volume": {"pool": "p", "volume": "a/b"}}, "volume"),
            ({"volume": {"pool": "p", "volume": ".."}}, "volume"),
        ],
    )
    def test_bad_sources_are_refused(self, source: dict[str, Any], needle: str) -> None:
        with pytest.raises(ValidationError, match=needle):
            LibvirtImageSpec.model_validate({"source": source})

    def test_secure_boot_needs_uefi(self) -> None:
        with pytest.raises(ValidationError, match="secureBoot requires firmware type UEFI"):
            LibvirtImageSpec.model_validate(
                {
                    "source": {"volume": {"pool": "p", "volume": "v"}},
                    "firmware": {"type": "BIOS", "secureBoot": True},
                }
            )

    @pytest.mark.parametrize("machine_type", ["virt", "pc-q35", "q35; rm -rf /", "<x>"])
    def test_unknown_machine_types_are_refused(self, machine_type: str) -> None:
        with pytest.raises(ValidationError, match=r"machineType|machine_type"):
            LibvirtImageSpec.model_validate(
                {
                    "source": {"volume": {"pool": "p", "volume": "v"}},
                    "guest": {"machineType": machine_type},
                }
            )


class TestLibvirtMachineClass:
    def test_a_topology_must_multiply_out_to_the_cpus(self) -> None:
        with pytest.raises(ValidationError, match="topology gives 4 vCPUs but cpus is 2"):
            LibvirtMachineClassSpec.model_validate(
                {
                    "cpus": 2,
                    "memory": "1Gi",
                    "topology": {"sockets": 1, "cores": 2, "threads": 2},
                }
            )

    @pytest.mark.parametrize(
        ("spec", "needle"),
        [
            ({"cpus": 1, "memory": "lots"}, "not a Kubernetes quantity"),
            ({"cpus": 1, "memory": "1Ki"}, "at least 1Mi"),
            ({"cpus": 0, "memory": "1Gi"}, "greater than or equal to 1"),
            ({"cpus": 1, "memory": "1Gi", "cpu": {"mode": "Custom"}}, "cpu.model is required"),
            (
                {"cpus": 1, "memory": "1Gi", "cpu": {"mode": "HostModel", "model": "x"}},
                "cpu.model is required",
            ),
            ({"cpus": 1, "memory": "1Gi", "hugepages": {"pageSize": "4Ki"}}, "2Mi or 1Gi"),
        ],
    )
    def test_refusals(self, spec: dict[str, Any], needle: str) -> None:
        with pytest.raises(ValidationError, match=needle):
            LibvirtMachineClassSpec.model_validate(spec)


class TestLibvirtNetwork:
    @pytest.mark.parametrize(
        ("source", "expected"),
        [
            ({"network": "default"}, AddressSourcePolicy.LEASE),
            ({"bridge": "br0"}, AddressSourcePolicy.ANY),
            ({"direct": {"device": "eth0"}}, AddressSourcePolicy.ANY),
        ],
    )
    def test_address_source_defaults_follow_the_attachment(
        self, source: dict[str, Any], expected: AddressSourcePolicy
    ) -> None:
        spec = LibvirtNetworkSpec.model_validate({"source": source})
        assert spec.effective_address_source() is expected

    def test_exactly_one_attachment(self) -> None:
        with pytest.raises(ValidationError, match="exactly one of network, bridge or direct"):
            LibvirtNetworkSpec.model_validate({"source": {"network": "a", "bridge": "b"}})

    def test_gateways_must_be_addresses_of_their_family(self) -> None:
        with pytest.raises(ValidationError, match="IPv4"):
            LibvirtNetworkSpec.model_validate(
                {"source": {"network": "a"}, "staticAddressing": {"ipv4Gateway": "fd00::1"}}
            )


class TestStorageAndLookups:
    def test_a_host_override_picks_that_hosts_pool(self) -> None:
        spec = LibvirtStorageClassSpec.model_validate(
            {"pool": "default", "hostPools": {"node-2": "nvme"}}
        )
        assert (spec.pool_on("node-1"), spec.pool_on("node-2")) == ("default", "nvme")

    def test_defaults_are_found_and_ambiguity_is_refused(self) -> None:
        def storage(name: str, default: bool) -> LibvirtStorageClass:
            return LibvirtStorageClass.model_validate(
                {"metadata": {"name": name}, "spec": {"pool": "p", "default": default}}
            )

        one = Catalog.of(storage_classes=[storage("a", False), storage("b", True)])
        found = one.default_storage_class()
        assert found is not None
        assert found.metadata.name == "b"
        assert Catalog.of().default_network() is None
        two = Catalog.of(storage_classes=[storage("a", True), storage("b", True)])
        with pytest.raises(AmbiguousDefaultError, match="a, b"):
            two.default_storage_class()

    def test_objects_read_from_the_api_server_parse_with_their_envelope(self) -> None:
        network = LibvirtNetwork.model_validate(
            {
                "apiVersion": "infrastructure.vm-api.io/v1alpha1",
                "kind": "LibvirtNetwork",
                "metadata": {"name": "lab", "uid": "u", "resourceVersion": "7"},
                "spec": {"source": {"network": "vmapi-lab"}, "default": True},
            }
        )
        assert network.spec.default


@pytest.mark.parametrize("text", ["1e200000", "1e999999", "1e9999999", "1e" + "9" * 62, "8Ei"])
def test_huge_quantities_are_refused_at_once(text: str) -> None:
    with allocating_at_most(ALLOCATION_LIMIT), pytest.raises(QuantityError, match="larger than"):
        parse_quantity(text)


@given(
    st.from_regex(
        r"[+-]?\d{0,30}(\.\d{0,30})?([eE][+-]?\d{1,12}|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?",
        fullmatch=True,
    )
)
@settings(max_examples=300, deadline=50)
def test_any_quantity_text_parses_or_is_refused_quickly(text: str) -> None:
    try:
        value = parse_quantity(text)
    except QuantityError:
        return
    assert 0 <= value <= MAX_BYTES
