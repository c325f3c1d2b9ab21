"""The snapshot's pure decisions: the machine's disks read from its domain, which are copied,
whether they fit, which consistency is recorded; and its volume names."""

from __future__ import annotations

from libvirt_provider import naming
from libvirt_provider.snapshot.names import (
    copy_volume_name,
    is_pending_overlay,
    owned_by,
    pending_overlay_name,
)
from libvirt_provider.snapshot.plan import (
    Problem,
    SourceDisk,
    achieved_consistency,
    dependents,
    domain_disks,
    missing_space,
    select_disks,
)
from libvirt_provider.snapshot_api import Consistency

UID = "0b5d3a4e-1111-2222-3333-444455556666"

DOMAIN = f"""<domain type='qemu'><devices>
  <disk type='volume' device='disk'><driver name='qemu' type='qcow2'/>
    <source pool='p' volume='ns_vm-0123456789abcdef--boot.qcow2'/><target dev='vda' bus='virtio'/>
    <alias name='ua-disk-boot'/></disk>
  <disk type='file' device='disk'><driver name='qemu' type='qcow2'/>
    <source file='/pool/{pending_overlay_name(UID, "logs")}'/><target dev='vdb' bus='virtio'/>
    <alias name='ua-disk-data-logs'/></disk>
  <disk type='volume' device='cdrom'><driver name='qemu' type='raw'/>
    <source pool='p' volume='seed.iso'/><target dev='sda' bus='sata'/>
    <alias name='ua-cloud-init'/></disk>
</devices></domain>"""


def test_the_domain_s_disks_are_named_as_the_vm_names_them_and_the_cd_rom_is_left_out() -> None:
    boot, logs = domain_disks(DOMAIN)
    assert boot == SourceDisk(
        name="bootDisk",
        target="vda",
        pool="p",
        volume="ns_vm-0123456789abcdef--boot.qcow2",
        path=None,
        format="qcow2",
    )
    assert not boot.pending
    assert logs.name == "logs"
    assert logs.pending
    assert logs.pending_for(UID)
    assert not logs.pending_for("another-uid")


def test_every_disk_is_copied_unless_some_are_named_and_an_unknown_name_is_refused() -> None:
    boot = SourceDisk("bootDisk", "vda", "p", "b", None, "qcow2")
    data = SourceDisk("logs", "vdb", "p", "l", None, "raw")
    assert select_disks(None, [boot, data]) == [boot, data]
    assert select_disks(["logs"], [boot, data]) == [data]
    refused = select_disks(["bootDisk", "nope"], [boot, data])
    assert isinstance(refused, Problem)
    assert refused.reason == "UnknownDisk"
    assert "'nope'" in refused.message
    assert "bootDisk, logs" in refused.message
    assert not refused.retry


def test_a_pool_without_room_for_the_copies_is_named() -> None:
    assert missing_space({"p": 100 << 20}, {"p": 1 << 30}) is None
    assert missing_space({"p": 100 << 20}, {"p": None}) is None
    short = missing_space({"p": 100 << 20, "q": 1}, {"p": 50 << 20, "q": 1 << 30})
    assert short is not None
    assert short.reason == "PoolFull"
    assert "pool 'p'" in short.message
    assert "'q'" not in short.message


def test_filesystem_is_recorded_only_when_the_agent_froze_the_guest() -> None:
    assert achieved_consistency(Consistency.AUTO, running=True, agent_answered=True) is (
        Consistency.FILESYSTEM
    )
    assert achieved_consistency(Consistency.AUTO, running=True, agent_answered=False) is (
        Consistency.CRASH
    )
    assert achieved_consistency(Consistency.CRASH, running=False, agent_answered=False) is (
        Consistency.CRASH
    )
    waits = achieved_consistency(Consistency.FILESYSTEM, running=False, agent_answered=False)
    assert isinstance(waits, Problem)
    assert waits.reason == "GuestAgentUnavailable"
    assert "powered off" in waits.message
    running = achieved_consistency(Consistency.FILESYSTEM, running=True, agent_answered=False)
    assert isinstance(running, Problem)
    assert "did not answer" in running.message


def test_volume_names_carry_the_snapshot_s_uid_and_never_look_like_a_machine_s() -> None:
    boot = copy_volume_name(UID, "bootDisk", extension="qcow2")
    lower = copy_volume_name(UID, "bootdisk", extension="qcow2")
    pending = pending_overlay_name(UID, "bootDisk")
    assert boot.startswith(f"snap-{UID}-")
    assert boot != lower
    assert owned_by(boot, UID)
    assert owned_by(pending, UID)
    assert not owned_by(boot, "0b5d3a4e-1111-2222-3333-444455556667")
    assert is_pending_overlay(f"/var/lib/pool/{pending}")
    assert not is_pending_overlay(boot)
    for name in (boot, pending):
        assert not naming.is_machine_volume(name)
        assert "/" not in name
        assert len(name) < 255


def test_dependents_are_the_volumes_backed_by_a_copy_whatever_the_path_spelling() -> None:
    copies = ["/pool/snap-u-boot.qcow2", "/pool/snap-u-logs.raw"]
    volumes = [
        ("pool/clone--boot.qcow2", "/pool//snap-u-boot.qcow2"),
        ("pool/web--boot.qcow2", "/pool/image-abc.qcow2"),
        ("pool/blank.raw", None),
        ("pool/snap-v-boot.qcow2", "/pool/snap-u-logs.raw"),
    ]
    assert dependents(copies, volumes) == ["pool/clone--boot.qcow2", "pool/snap-v-boot.qcow2"]
    assert dependents([], volumes) == []
