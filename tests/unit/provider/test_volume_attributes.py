"""A disk's VolumeAttributesClass: its parameters as I/O limits, and what the resolver says of a
class it cannot honour (docs/catalog.md, "Volume attributes classes")."""

from __future__ import annotations

from typing import Any

import pytest

from libvirt_provider import constants as c
from libvirt_provider.resolve.iotune import PARAMETERS, parse_iotune
from libvirt_provider.resolved import IoTune
from tests.support import builders as b
from tests.support.builders import only_problem, resolve

MI = 2**20


def _parse(**parameters: str) -> tuple[IoTune | None, list[str]]:
    return parse_iotune(b.volume_attributes_class("gold", **parameters))


class TestParameters:
    def test_every_parameter_maps_to_its_libvirt_element(self) -> None:
        iotune, problems = _parse(
            readBytesPerSecond="10Mi",
            readBytesPerSecondMax="20Mi",
            readBytesPerSecondMaxLength="5",
            writeBytesPerSecond="1048576",
            writeIOPS="100",
            writeIOPSMax="150",
            writeIOPSMaxLength="2",
            totalIOPS="0",
            groupName="tenant-a",
        )
        assert problems == []
        assert iotune == IoTune(
            read_bytes_sec=10 * MI,
            read_bytes_sec_max=20 * MI,
            read_bytes_sec_max_length=5,
            write_bytes_sec=MI,
            write_iops_sec=100,
            write_iops_sec_max=150,
            write_iops_sec_max_length=2,
            group_name="tenant-a",
        )

    def test_known_keys_cover_both_families_directions_and_bursts(self) -> None:
        assert len(PARAMETERS) == 18
        assert PARAMETERS["totalBytesPerSecondMaxLength"] == "total_bytes_sec_max_length"
        assert PARAMETERS["readIOPS"] == "read_iops_sec"
        assert set(PARAMETERS.values()) <= set(IoTune.model_fields)

    def test_no_parameters_is_no_limit(self) -> None:
        iotune, problems = _parse()
        assert problems == []
        assert iotune == IoTune()
        assert not iotune.limited

    def test_the_largest_value_qemu_takes_is_accepted(self) -> None:
        iotune, _ = _parse(totalIOPS=str(10**15))
        assert iotune is not None
        assert iotune.total_iops_sec == 10**15

    @pytest.mark.parametrize(
        ("parameters", "key", "words"),
        [
            ({"readBytesPerSecond": "-1"}, "readBytesPerSecond", "negative"),
            ({"readIOPS": "-5"}, "readIOPS", "not a whole number of operations per second"),
            ({"totalIOPS": str(10**15 + 1)}, "totalIOPS", "largest limit qemu accepts"),
            ({"readBytesPerSecond": "2Pi"}, "readBytesPerSecond", "largest limit qemu accepts"),
            ({"readBytesPerSecond": "1e30"}, "readBytesPerSecond", "larger than"),
            ({"writeIOPS": "fast"}, "writeIOPS", "not a whole number"),
            ({"writeBytesPerSecond": "ten"}, "writeBytesPerSecond", "not a Kubernetes quantity"),
            ({"readBytesPerSecond": "0.5"}, "readBytesPerSecond", "whole number of bytes"),
            ({"readIOPSMaxLength": "1.5"}, "readIOPSMaxLength", "whole number of seconds"),
            ({"iops": "100"}, "iops", "unknown; the known parameters are totalBytesPerSecond"),
            (
                {"totalBytesPerSecond": "1Mi", "readBytesPerSecond": "1Mi"},
                "totalBytesPerSecond",
                "cannot be combined with readBytesPerSecond",
            ),
            (
                {"totalIOPSMax": "9", "totalIOPS": "1", "writeIOPSMax": "9", "writeIOPS": "1"},
                "totalIOPSMax",
                "cannot be combined with writeIOPSMax",
            ),
            (
                {"readIOPS": "100", "readIOPSMax": "50"},
                "readIOPSMax",
                "50 is below readIOPS (100)",
            ),
            ({"readIOPSMax": "50"}, "readIOPSMax", "needs readIOPS"),
            (
                {"readIOPS": "1", "readIOPSMaxLength": "3"},
                "readIOPSMaxLength",
                "needs readIOPSMax",
            ),
            ({"groupName": "a/b"}, "groupName", "not a group name"),
            ({"groupName": "alone"}, "groupName", "needs at least one limit"),
        ],
    )
    def test_bad_input_is_refused_naming_the_key(
        self, parameters: dict[str, str], key: str, words: str
    ) -> None:
        iotune, problems = _parse(**parameters)
        assert iotune is None
        assert any(p.startswith(f"parameter {key}: ") and words in p for p in problems), problems

    def test_every_problem_is_said_at_once(self) -> None:
        _, problems = _parse(readIOPS="x", writeIOPS="-1", bogus="1")
        assert len(problems) == 3


def _vm(class_name: str | None, *, boot: str | None = None) -> dict[str, Any]:
    disk: dict[str, Any] = {"name": "data", "source": {"blank": True}, "sizeGiB": 1}
    if class_name is not None:
        disk["volumeAttributesClassName"] = class_name
    boot_disk: dict[str, Any] = {"source": {"image": b.ref("LibvirtImage", "tiny")}, "sizeGiB": 2}
    if boot is not None:
        boot_disk["volumeAttributesClassName"] = boot
    return b.vm_spec(bootDisk=boot_disk, disks=[disk])


SLOW = b.volume_attributes_class("slow", readBytesPerSecond="10Mi")


class TestResolution:
    def test_a_disk_gets_its_class_limits_and_names_it(self) -> None:
        machine = resolve(vm=_vm("slow", boot="slow"), volume_attributes_classes=[SLOW]).machine
        assert machine is not None
        boot, data = machine.domain.disks
        assert data.iotune == IoTune(read_bytes_sec=10 * MI)
        assert boot.iotune == IoTune(read_bytes_sec=10 * MI)
        assert [(d.disk, d.volume_attributes_class) for d in machine.disk_classes] == [
            ("boot", "slow"),
            ("data-data", "slow"),
        ]

    def test_a_disk_without_a_class_has_no_limits(self) -> None:
        machine = resolve(vm=_vm(None)).machine
        assert machine is not None
        assert all(not d.iotune.limited for d in machine.domain.disks)
        assert [d.volume_attributes_class for d in machine.disk_classes] == [None, None]

    def test_an_unknown_class_is_a_missing_reference(self) -> None:
        reason, where, message = only_problem(resolve(vm=_vm("gold")))
        assert reason == c.REASON_REFERENCE_NOT_FOUND
        assert where == "VirtualMachine.spec.disks[data].volumeAttributesClassName"
        assert message == "VolumeAttributesClass 'gold' not found"

    def test_another_drivers_class_is_invalid(self) -> None:
        ebs = b.volume_attributes_class("gold", driver="ebs.csi.aws.com", iops="3000")
        reason, _, message = only_problem(resolve(vm=_vm("gold"), volume_attributes_classes=[ebs]))
        assert reason == c.REASON_INVALID_SPEC
        assert "driver 'ebs.csi.aws.com'" in message
        assert c.VOLUME_ATTRIBUTES_DRIVER in message

    def test_a_malformed_class_is_invalid_naming_class_and_key(self) -> None:
        bad = b.volume_attributes_class("bad", readBytesPerSecond="-10Mi")
        reason, where, message = only_problem(
            resolve(vm=_vm(None, boot="bad"), volume_attributes_classes=[bad])
        )
        assert reason == c.REASON_INVALID_SPEC
        assert where == "VirtualMachine.spec.bootDisk.volumeAttributesClassName"
        assert message.startswith("VolumeAttributesClass 'bad' parameter readBytesPerSecond: ")
