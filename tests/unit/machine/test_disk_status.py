"""status.disks: each disk's VolumeAttributesClass, as a PVC reports its own (disk_status.py)."""

from __future__ import annotations

from typing import Any

from libvirt_provider.machine.disk_status import applied_disks, infeasible_disks

SPEC: dict[str, Any] = {
    "bootDisk": {"sizeGiB": 1},
    "disks": [{"name": "data", "volumeAttributesClassName": "broken"}, {"name": "logs"}],
}


def test_applied_classes_are_current() -> None:
    disks = applied_disks(None, [("boot", None), ("data-data", "slow")], set())
    assert disks == [
        {"name": "bootDisk"},
        {"name": "data", "currentVolumeAttributesClassName": "slow"},
    ]


def test_a_change_waiting_for_the_machine_is_pending_on_the_old_class() -> None:
    before = [{"name": "data", "currentVolumeAttributesClassName": "slow"}]
    disks = applied_disks(before, [("data-data", "fast")], {"data-data"})
    assert disks == [
        {
            "name": "data",
            "currentVolumeAttributesClassName": "slow",
            "modifyVolumeStatus": {"status": "Pending", "targetVolumeAttributesClassName": "fast"},
        }
    ]


def test_an_unhonoured_class_is_infeasible_and_the_old_one_stays_current() -> None:
    before = [
        {"name": "bootDisk"},
        {"name": "data", "currentVolumeAttributesClassName": "fast"},
    ]
    problems = [
        ("VirtualMachine.spec.disks[data].volumeAttributesClassName", "parameter x: unknown"),
        ("VirtualMachine.spec.instanceType", "not found"),
    ]
    disks = infeasible_disks(before, problems, SPEC)
    assert disks == [
        {"name": "bootDisk"},
        {
            "name": "data",
            "currentVolumeAttributesClassName": "fast",
            "modifyVolumeStatus": {
                "status": "Infeasible",
                "targetVolumeAttributesClassName": "broken",
                "message": "parameter x: unknown",
            },
        },
    ]


def test_the_boot_disk_has_its_own_name() -> None:
    spec = {"bootDisk": {"volumeAttributesClassName": "gone"}}
    problems = [("VirtualMachine.spec.bootDisk.volumeAttributesClassName", "not found")]
    [disk] = infeasible_disks(None, problems, spec) or []
    assert disk["name"] == "bootDisk"
    assert disk["modifyVolumeStatus"]["targetVolumeAttributesClassName"] == "gone"


def test_problems_with_no_class_leave_the_status_as_it_was() -> None:
    assert infeasible_disks([], [("VirtualMachine.spec.instanceType", "x")], SPEC) is None


def test_applying_again_ends_the_infeasible_state() -> None:
    before = [
        {
            "name": "data",
            "currentVolumeAttributesClassName": "fast",
            "modifyVolumeStatus": {"status": "Infeasible", "targetVolumeAttributesClassName": "b"},
        }
    ]
    assert applied_disks(before, [("data-data", "slow")], set()) == [
        {"name": "data", "currentVolumeAttributesClassName": "slow"}
    ]
