"""Clones: a disk whose `source.snapshot` names a LibvirtSnapshot resolves to an overlay on the
snapshot's copy of that disk, on the snapshot's host only; anything else is a problem with a
reason, and the machine is not built."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from catalog.snapshot_source import SnapshotDiskSource, SnapshotSource
from libvirt_provider import constants as c
from libvirt_provider.machine.catalog import snapshot_source
from libvirt_provider.resolve import resolve_machine
from libvirt_provider.resolve.cloudinit import instance_id
from tests.support import builders as b
from tests.support.builders import only_problem, resolve

GIB = 2**30
BOOT_COPY = SnapshotDiskSource(
    pool="vmapi-lab", volume="snap-u1-bootdisk-1234.qcow2", format="qcow2", size_bytes=GIB
)
LOGS_COPY = SnapshotDiskSource(
    pool="vmapi-lab", volume="snap-u1-logs-5678.raw", format="raw", size_bytes=GIB
)


def snapshot(name: str = "s1", **overrides: Any) -> SnapshotSource:
    fields: dict[str, Any] = {
        "namespace": "default",
        "name": name,
        "uid": "u1",
        "ready": True,
        "host": b.HOST.hostname,
        "disks": {c.SNAPSHOT_BOOT_DISK: BOOT_COPY, "logs": LOGS_COPY},
        "boot_image": "tiny",
    }
    fields.update(overrides)
    return SnapshotSource(**fields)


def clone_vm(name: str = "s1", *, size: int = 2, disks: list[dict[str, Any]] | None = None) -> Any:
    return b.vm_spec(
        bootDisk={"source": {"snapshot": b.ref("LibvirtSnapshot", name)}, "sizeGiB": size},
        disks=disks or [],
    )


def data_disk(name: str, snap: str = "s1") -> dict[str, Any]:
    return {"name": name, "source": {"snapshot": b.ref("LibvirtSnapshot", snap)}, "sizeGiB": 1}


class TestAClone:
    def test_the_boot_disk_is_an_overlay_on_the_snapshots_boot_copy_grown_to_size(self) -> None:
        machine = resolve(vm=clone_vm(), snapshots=[snapshot()]).machine
        assert machine is not None
        (boot,) = machine.volumes
        assert boot.base is not None
        assert boot.base.snapshot
        assert (boot.base.pool, boot.base.volume, boot.base.format.value) == (
            "vmapi-lab",
            BOOT_COPY.volume,
            "qcow2",
        )
        assert boot.capacity_bytes == 2 * GIB
        # The clone's own volume is named after its own domain, never the snapshot's.
        assert boot.volume.startswith(machine.domain.name)
        assert not boot.volume.startswith(c.SNAPSHOT_VOLUME_PREFIX)

    def test_a_data_disk_takes_the_copy_of_the_same_name_in_its_format(self) -> None:
        vm = clone_vm(disks=[data_disk("logs")])
        machine = resolve(vm=vm, snapshots=[snapshot()]).machine
        assert machine is not None
        logs = machine.volumes[1]
        assert logs.base is not None
        assert (logs.base.volume, logs.base.format.value, logs.format.value) == (
            LOGS_COPY.volume,
            "raw",
            "qcow2",
        )

    def test_a_data_disk_of_another_name_takes_the_snapshots_only_data_disk(self) -> None:
        vm = b.vm_spec(disks=[data_disk("restored")])
        machine = resolve(vm=vm, snapshots=[snapshot()]).machine
        assert machine is not None
        assert machine.volumes[1].base is not None
        assert machine.volumes[1].base.volume == LOGS_COPY.volume

    def test_a_data_disk_matching_nothing_is_invalid_and_lists_what_the_snapshot_holds(
        self,
    ) -> None:
        two = snapshot(disks={c.SNAPSHOT_BOOT_DISK: BOOT_COPY, "a": LOGS_COPY, "b": LOGS_COPY})
        reason, field, message = only_problem(
            resolve(vm=b.vm_spec(disks=[data_disk("other")]), snapshots=[two])
        )
        assert reason == c.REASON_INVALID_SPEC
        assert field.endswith("disks[other].source.snapshot")
        assert "a, b, bootDisk" in message

    def test_a_boot_disk_from_a_snapshot_without_one_is_invalid(self) -> None:
        data_only = snapshot(disks={"logs": LOGS_COPY})
        reason, _, message = only_problem(resolve(vm=clone_vm(), snapshots=[data_only]))
        assert reason == c.REASON_INVALID_SPEC
        assert "no bootDisk" in message

    def test_a_size_below_the_snapshots_disk_is_refused_before_anything_is_made(self) -> None:
        big = snapshot(disks={c.SNAPSHOT_BOOT_DISK: replace(BOOT_COPY, size_bytes=3 * GIB)})
        reason, _, message = only_problem(resolve(vm=clone_vm(size=2), snapshots=[big]))
        assert reason == c.REASON_INVALID_SPEC
        assert "at least 3" in message


class TestACloneWaits:
    def test_a_missing_snapshot_is_not_found(self) -> None:
        reason, field, message = only_problem(resolve(vm=clone_vm(), snapshots=[]))
        assert reason == c.REASON_REFERENCE_NOT_FOUND
        assert field.endswith("bootDisk.source.snapshot")
        assert "namespace 'default'" in message

    def test_a_snapshot_of_the_same_name_in_another_namespace_is_never_seen(self) -> None:
        elsewhere = snapshot(namespace="team-b")
        reason, _, _ = only_problem(resolve(vm=clone_vm(), snapshots=[elsewhere]))
        assert reason == c.REASON_REFERENCE_NOT_FOUND

    @pytest.mark.parametrize(
        ("state", "said"),
        [({"ready": False}, "not ready"), ({"deleting": True}, "being deleted")],
    )
    def test_a_snapshot_not_ready_or_going_waits(self, state: dict[str, Any], said: str) -> None:
        reason, _, message = only_problem(resolve(vm=clone_vm(), snapshots=[snapshot(**state)]))
        assert reason == c.REASON_SNAPSHOT_NOT_READY
        assert said in message

    def test_on_another_host_the_clone_is_not_available_naming_the_snapshots_host(self) -> None:
        elsewhere = snapshot(host="node-2")
        resolution = resolve(vm=clone_vm(), snapshots=[elsewhere])
        reason, _, message = only_problem(resolution)
        assert reason == c.REASON_NOT_AVAILABLE_ON_HOST
        assert "'node-2'" in message
        assert resolution.problems[0].missing == "snapshot s1"

    def test_the_image_the_snapshots_machine_booted_must_still_exist(self) -> None:
        reason, _, message = only_problem(
            resolve(vm=clone_vm(), snapshots=[snapshot(boot_image="gone")])
        )
        assert reason == c.REASON_REFERENCE_NOT_FOUND
        assert "'gone'" in message

    def test_another_kind_is_not_this_providers(self) -> None:
        vm = b.vm_spec(disks=[{**data_disk("d"), "source": {"snapshot": b.ref("Snap", "s1")}}])
        reason, _, _ = only_problem(resolve(vm=vm, snapshots=[snapshot()]))
        assert reason == "UnsupportedByProvider"


def test_cloud_init_gives_every_clone_its_own_instance_id() -> None:
    """The id starts with the machine's uid: a clone's guest, carrying the source's cloud-init
    cache on its disk, sees a new instance and runs its per-instance work again."""
    same = {"hostname": "web", "ssh_public_keys": (), "user_data": b"x", "network_config": None}
    assert instance_id("uid-a", **same) != instance_id("uid-b", **same)


def test_a_snapshot_object_becomes_its_source_view() -> None:
    obj = {
        "metadata": {"namespace": "default", "name": "s1", "uid": "u1", "resourceVersion": "7"},
        "spec": {"virtualMachineName": "web"},
        "status": {
            "readyToUse": True,
            "host": "node-1",
            "disks": [
                {
                    "name": "bootDisk",
                    "pool": "p",
                    "volume": "snap-u1-b.qcow2",
                    "sizeBytes": 5,
                    "allocatedBytes": 1,
                },
                {
                    "name": "logs",
                    "pool": "p",
                    "volume": "snap-u1-l.raw",
                    "sizeBytes": 6,
                    "allocatedBytes": 1,
                },
            ],
            "source": {
                "virtualMachine": "web",
                "virtualMachineUid": "v",
                "machine": "web",
                "machineUid": "m",
                "powerState": "Running",
                "spec": {"bootDisk": {"source": {"image": {"name": "tiny"}}}},
            },
        },
    }
    view = snapshot_source(obj)
    assert view.ready
    assert not view.deleting
    assert view.boot_image == "tiny"
    assert view.disks["bootDisk"].format == "qcow2"
    assert view.disks["logs"].format == "raw"
    assert not snapshot_source({"metadata": {"name": "s2", "namespace": "d"}}).ready


def test_a_clone_already_built_does_not_wait_on_its_snapshot_being_deleted() -> None:
    """The snapshot keeps its copies while clones use them (InUse), so a built clone's passes
    go on; a clone not built yet never starts on a snapshot being deleted."""
    built = resolve(vm=clone_vm(), snapshots=[snapshot()]).machine
    assert built is not None
    made = frozenset((v.pool, v.volume) for v in built.volumes)
    going = snapshot(deleting=True)
    again = resolve_machine(
        vm_name="web",
        vm_spec=clone_vm(),
        machine=b.machine(),
        catalog=b.catalog(snapshots=[going]),
        secrets={},
        host=b.HOST,
        existing_volumes=made,
    )
    assert again.machine is not None
    assert again.machine.volumes == built.volumes
    reason, _, _ = only_problem(resolve(vm=clone_vm(), snapshots=[going]))
    assert reason == c.REASON_SNAPSHOT_NOT_READY
