"""A running busybox machine moves from one lab host to another through a LibvirtMigration, and
migrations that cannot go on are refused before anything is copied.

Why: the product slice of live migration (docs/migration.md): the target's daemon prepares the
machine's volumes, the source's daemon runs libvirt's peer-to-peer TLS migration with the disks,
deletes what it held and moves the binding; the target's daemon adopts the running domain (same
UUID and MAC, never rebooted) and records what libvirt measured. The guest's own shell shows
that it moved alive: a process started before the move still runs, its kernel never rebooted, and
the data it wrote to its disk is there. One guest is booted and moved for the whole module; the
refusals run against it afterwards.

Cost: about 70-105 s (one busybox guest: ~20 s to boot under TCG, then four migrations of it of
~6-10 s each, one slowed and cancelled, one through `kubectl vm migrate --wait`, and refusals of
a few seconds each).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import libvirt
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from lxml import etree

from libvirt_provider import constants as c
from tests.e2e.migration.moves import (
    PLURAL,
    assert_moved_whole,
    create_migration,
    delete_migrations,
    migration,
    pool_volumes,
    read_migration,
    wait_ended,
)
from tests.support.console import plugin_command
from tests.support.daemons import Fleet
from tests.support.factories import pair
from tests.support.hosts import host_object
from tests.support.kube import GROUP, V, create, domain_of, get, wait_ready
from tests.support.lab_access import LabHost, LabInfo
from tests.support.virt import GuestShell
from tests.support.waiting import eventually


@dataclass(frozen=True)
class Moved:
    ns: str
    name: str
    uid: str
    domain: str
    mac: str
    source: LabHost
    target: LabHost
    source_machines_before: int
    target_machines_before: int
    migration: dict[str, Any]
    before: GuestState


@dataclass(frozen=True)
class GuestState:
    """What the guest's shell told on the source before the move."""

    boot_id: str
    uptime: float
    sleeper: str  # the pid of a process started in the guest


# What the guest writes into its boot disk's overlay before the move, far past the 16 MiB base
# image's data: the disk figures must then count it, and the target must hold it.
WRITTEN_LINE = b"vmapi-migrated-data\n"
WRITTEN_MIB, WRITTEN_AT_MIB = 4, 256
WRITTEN_MD5 = hashlib.md5(
    (WRITTEN_LINE * (WRITTEN_MIB * 2**20 // len(WRITTEN_LINE) + 1))[: WRITTEN_MIB * 2**20]
).hexdigest()
READ_BACK = (
    f"dd if=/dev/vda bs=1M skip={WRITTEN_AT_MIB} count={WRITTEN_MIB} 2>/dev/null"
    " | md5sum | cut -c1-32"
)


def _before_the_move(uri: str, domain: str) -> GuestState:
    """Through the guest's own shell: a process started, data written to the boot disk (read back),
    and what tells a reboot (the kernel's boot id, the uptime)."""
    with GuestShell(uri, domain) as shell:
        assert shell.ask("cat /sys/block/vda/size") == str(2**30 // 512), "vda is the boot disk"
        written = shell.ask(
            f"yes {WRITTEN_LINE.decode().strip()} | head -c {WRITTEN_MIB * 2**20} | "
            f"dd of=/dev/vda bs=1M seek={WRITTEN_AT_MIB} conv=fsync 2>/dev/null; {READ_BACK}"
        )
        assert written == WRITTEN_MD5, written
        return GuestState(
            boot_id=shell.ask("cat /proc/sys/kernel/random/boot_id"),
            uptime=float(shell.ask("cut -d ' ' -f 1 /proc/uptime")),
            sleeper=shell.ask("sleep 86400 </dev/null >/dev/null 2>&1 & echo $!"),
        )


def _machines_on(api: client.ApiClient, host: str) -> int:
    return int(((host_object(api, host) or {}).get("status") or {})["allocated"]["machines"])


def _mac(conn: libvirt.virConnect, uid: str) -> str:
    xml = etree.fromstring(conn.lookupByUUIDString(uid).XMLDesc(0))
    mac = xml.find("devices/interface/mac")
    assert mac is not None
    return str(mac.get("address"))


@pytest.fixture(scope="module")
def moved(fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str) -> Iterator[Moved]:
    source, target = lab.hosts[0], lab.hosts[1]
    vm, lm = pair(ns, "mover")
    lm["metadata"]["labels"][c.HOST_LABEL] = source.name
    lm["spec"]["host"] = source.name
    create(api_client, [vm, lm])
    try:
        wait_ready(api_client, ns, "mover", what="the machine Ready on its source", addresses=True)
        machine = get(api_client, ns, "mover", vm=False)
        assert machine is not None
        uid = str(machine["metadata"]["uid"])
        conn = libvirt.open(source.uri)
        try:
            mac = _mac(conn, uid)
        finally:
            conn.close()
        eventually(
            lambda: _machines_on(api_client, source.name) >= 1,
            timeout=30,
            what="the source counting the machine",
        )
        before = _machines_on(api_client, source.name)
        target_before = _machines_on(api_client, target.name)
        guest = _before_the_move(source.uri, domain_of(api_client, ns, "mover"))
        name = "move-" + uuid.uuid4().hex[:6]
        create_migration(api_client, migration(ns, name, "mover", target.name))
        done = wait_ended(api_client, ns, name)
        yield Moved(
            ns=ns,
            name=name,
            uid=uid,
            domain=domain_of(api_client, ns, "mover"),
            mac=mac,
            source=source,
            target=target,
            source_machines_before=before,
            target_machines_before=target_before,
            migration=done,
            before=guest,
        )
    finally:
        delete_migrations(api_client, ns)


def test_the_migration_succeeded_with_libvirts_figures(moved: Moved) -> None:
    status = moved.migration["status"]
    assert status["phase"] == c.MIGRATION_PHASE_SUCCEEDED, status
    assert status["source"] == moved.source.name
    assert status["target"] == moved.target.name
    assert status["startTime"] <= status["completionTime"]
    result = status["result"]
    assert result["downtimeMilliseconds"] > 0, result
    assert result["elapsedMilliseconds"] > 0, result
    # The guest's 256 MiB of RAM, zero pages mostly skipped; of the disks only what the guest
    # wrote into its overlay (the 4 MiB written before the move, and next to nothing else:
    # busybox runs from memory), never the 16 MiB base image under it.
    assert result["memoryTotal"] >= 200 * 2**20, result
    assert 0 < result["memoryProcessed"] <= result["memoryTotal"], result
    assert WRITTEN_MIB * 2**20 <= result["diskTotal"] < 16 * 2**20, result
    assert result["diskProcessed"] == result["diskTotal"], result
    cond = next(x for x in status["conditions"] if x["type"] == c.MIGRATION_CONDITION_SUCCEEDED)
    assert (cond["status"], cond["reason"]) == ("True", c.MIGRATION_REASON_SUCCEEDED), cond


def test_the_machine_runs_on_the_target_with_its_uuid_and_mac(
    moved: Moved, api_client: client.ApiClient
) -> None:
    conn = libvirt.open(moved.target.uri)
    try:
        dom = conn.lookupByUUIDString(moved.uid)
        assert dom.name() == moved.domain
        assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
        assert dom.isPersistent()
        assert _mac(conn, moved.uid) == moved.mac
        # Never restarted: its CPU time keeps growing from where it was (not rebooted: the
        # domain's id is the one the migration gave it, and the machine's status says Ready).
        before = dom.info()[4]
        eventually(lambda: dom.info()[4] > before, timeout=30, what="the guest's CPU time to grow")
    finally:
        conn.close()
    machine = get(api_client, moved.ns, "mover", vm=False)
    assert machine is not None
    assert machine["spec"]["host"] == moved.target.name
    assert machine["metadata"]["labels"][c.HOST_LABEL] == moved.target.name
    assert "migration" not in machine["status"], machine["status"]
    eventually(
        lambda: (
            (get(api_client, moved.ns, "mover", vm=False) or {}).get("status", {}).get("providerID")
            == f"libvirt://{moved.target.name}/{moved.uid}"
        ),
        timeout=30,
        what="the machine's providerID naming the target",
    )
    wait_ready(api_client, moved.ns, "mover", what="the VM Ready on the target", addresses=True)


def test_its_processes_kept_running_and_its_disk_holds_what_it_wrote(moved: Moved) -> None:
    """The guest's own view, through its shell on the target: the same kernel still running (its
    boot id; its uptime went on), the process started before the move alive, the data written
    before the move read back."""
    with GuestShell(moved.target.uri, moved.domain) as shell:
        assert shell.ask("cat /proc/sys/kernel/random/boot_id") == moved.before.boot_id
        assert float(shell.ask("cut -d ' ' -f 1 /proc/uptime")) > moved.before.uptime
        alive = f"kill -0 {moved.before.sleeper} && echo alive || echo gone"
        assert shell.ask(alive) == "alive", f"process {moved.before.sleeper} did not survive"
        assert shell.ask(READ_BACK) == WRITTEN_MD5


def test_the_source_holds_nothing_of_it(
    moved: Moved, lab: LabInfo, api_client: client.ApiClient
) -> None:
    assert_moved_whole(lab, moved.source, moved.target, moved.uid, moved.domain)
    eventually(
        lambda: _machines_on(api_client, moved.source.name) == moved.source_machines_before - 1,
        timeout=30,
        what="the source no longer counting the machine",
    )
    eventually(
        lambda: _machines_on(api_client, moved.target.name) == moved.target_machines_before + 1,
        timeout=30,
        what="the target counting it",
    )


def test_a_tenant_cannot_move_the_machine_by_editing_its_host(
    moved: Moved, api_client: client.ApiClient
) -> None:
    with pytest.raises(ApiException) as refused:
        client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
            GROUP, V, moved.ns, "libvirtmachines", "mover", {"spec": {"host": moved.source.name}}
        )
    assert refused.value.status == 422
    assert "only a LibvirtMigration moves a machine" in str(refused.value.body)


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("self", c.MIGRATION_REASON_SAME_HOST),
        ("no-such-host", c.MIGRATION_REASON_TARGET_NOT_FOUND),
    ],
)
def test_a_migration_that_cannot_go_on_is_refused_before_anything_is_copied(
    moved: Moved, api_client: client.ApiClient, target: str, reason: str
) -> None:
    to = moved.target.name if target == "self" else target
    name = "refused-" + uuid.uuid4().hex[:6]
    create_migration(api_client, migration(moved.ns, name, "mover", to))
    status = wait_ended(api_client, moved.ns, name, timeout=60)["status"]
    assert status["phase"] == c.MIGRATION_PHASE_FAILED, status
    cond = next(x for x in status["conditions"] if x["type"] == c.MIGRATION_CONDITION_SUCCEEDED)
    assert (cond["status"], cond["reason"]) == ("False", reason), cond
    said = [
        e.reason
        for e in client.CoreV1Api(api_client).list_namespaced_event(moved.ns).items
        if e.involved_object.kind == c.MIGRATION_KIND and e.involved_object.name == name
    ]
    assert reason in said, said
    machine = get(api_client, moved.ns, "mover", vm=False)
    assert machine is not None
    assert machine["spec"]["host"] == moved.target.name
    assert "migration" not in machine["status"]


def test_deleting_a_running_migration_cancels_it_and_the_machine_stays(
    moved: Moved, lab: LabInfo, api_client: client.ApiClient
) -> None:
    """Back to the first host, slowed to 1 MiB/s so the copy is still running when the
    migration is deleted: the job is aborted on the source, the machine keeps running there,
    the target deletes what it prepared, and the migration goes once nothing is left."""
    here, there = moved.target, moved.source
    conn = libvirt.open(here.uri)
    try:
        dom = conn.lookupByUUIDString(moved.uid)
        dom.migrateSetMaxSpeed(1, 0)
        name = "cancel-" + uuid.uuid4().hex[:6]
        create_migration(api_client, migration(moved.ns, name, "mover", there.name))
        eventually(
            lambda: (
                ((read_migration(api_client, moved.ns, name) or {}).get("status") or {})
                .get("progress", {})
                .get("memoryProcessed")
            ),
            timeout=120,
            what="the slowed copy under way",
        )
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            GROUP, V, moved.ns, PLURAL, name
        )
        eventually(
            lambda: read_migration(api_client, moved.ns, name) is None,
            timeout=90,
            what="the cancelled migration gone once nothing is left of it",
        )
        said = [
            e.reason
            for e in client.CoreV1Api(api_client).list_namespaced_event(moved.ns).items
            if e.involved_object.kind == c.MIGRATION_KIND and e.involved_object.name == name
        ]
        assert c.MIGRATION_REASON_CANCELLED in said, said
        assert c.EVENT_MIGRATION_TARGET_CLEANED in said, said
        assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
        dom.migrateSetMaxSpeed(0, 0)
    finally:
        conn.close()
    other = libvirt.open(there.uri)
    try:
        with pytest.raises(libvirt.libvirtError):
            other.lookupByUUIDString(moved.uid)
        assert pool_volumes(other, lab, moved.domain) == []
    finally:
        other.close()
    machine = get(api_client, moved.ns, "mover", vm=False)
    assert machine is not None
    assert machine["spec"]["host"] == here.name
    assert "migration" not in machine["status"]


def test_without_a_target_the_least_loaded_other_host_that_fits_is_chosen(
    moved: Moved, lab: LabInfo, api_client: client.ApiClient
) -> None:
    """Of the module's two hosts the only other one: the machine goes back to it."""
    name = "anywhere-" + uuid.uuid4().hex[:6]
    create_migration(api_client, migration(moved.ns, name, "mover", None))
    status = wait_ended(api_client, moved.ns, name)["status"]
    assert status["phase"] == c.MIGRATION_PHASE_SUCCEEDED, status
    assert (status["source"], status["target"]) == (moved.target.name, moved.source.name)
    said = [
        e.reason
        for e in client.CoreV1Api(api_client).list_namespaced_event(moved.ns).items
        if e.involved_object.kind == c.MIGRATION_KIND and e.involved_object.name == name
    ]
    assert c.EVENT_MIGRATION_SCHEDULED in said, said
    machine = get(api_client, moved.ns, "mover", vm=False)
    assert machine is not None
    assert machine["spec"]["host"] == moved.source.name
    conn = libvirt.open(moved.source.uri)
    try:
        assert conn.lookupByUUIDString(moved.uid).state()[0] == libvirt.VIR_DOMAIN_RUNNING
    finally:
        conn.close()


def test_a_stopped_machine_is_refused_not_moved(
    moved: Moved, lab: LabInfo, api_client: client.ApiClient
) -> None:
    """Live migration only: a powered-off machine stays where it is, with the reason."""
    vm, lm = pair(moved.ns, "idle", vm_spec={"powerState": "PoweredOff"})
    lm["metadata"]["labels"][c.HOST_LABEL] = moved.target.name
    lm["spec"]["host"] = moved.target.name
    create(api_client, [vm, lm])
    eventually(
        lambda: (
            ((get(api_client, moved.ns, "idle", vm=False) or {}).get("status") or {}).get(
                "powerState"
            )
            == "PoweredOff"
        ),
        timeout=60,
        what="the stopped machine built on its host",
    )
    name = "stopped-" + uuid.uuid4().hex[:6]
    create_migration(api_client, migration(moved.ns, name, "idle", moved.source.name))
    status = wait_ended(api_client, moved.ns, name, timeout=60)["status"]
    assert status["phase"] == c.MIGRATION_PHASE_FAILED, status
    cond = next(x for x in status["conditions"] if x["type"] == c.MIGRATION_CONDITION_SUCCEEDED)
    assert cond["reason"] == c.MIGRATION_REASON_MACHINE_NOT_RUNNING, cond
    assert "power state PoweredOff" in cond["message"], cond
    assert "preparedVolumes" not in status
    conn = libvirt.open(moved.source.uri)
    try:
        assert pool_volumes(conn, lab, domain_of(api_client, moved.ns, "idle")) == []
    finally:
        conn.close()


def test_kubectl_vm_migrate_waits_for_the_move_and_exits_zero(
    moved: Moved, lab: LabInfo, api_client: client.ApiClient
) -> None:
    """The plugin as a user runs it (`kubectl vm migrate NAME --to HOST --wait`, docs/migration.md):
    it names the migration after the machine, follows it, ends with libvirt's downtime and exits
    0 once the machine runs on the other host."""
    machine = get(api_client, moved.ns, "mover", vm=False)
    assert machine is not None
    here = str(machine["spec"]["host"])
    there = moved.target if here == moved.source.name else moved.source
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    command = plugin_command(lab.kubeconfig, "migrate", "mover", "--to", there.name)
    done = subprocess.run(
        [*command, "-n", moved.ns, "--wait", "--timeout", "240"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{c.MIGRATION_KIND.lower()}.{GROUP}/mover-"), lines
    assert lines[0].endswith(" created"), lines
    assert lines[-1].startswith(f"Succeeded {here} -> {there.name}: downtime "), lines
    machine = get(api_client, moved.ns, "mover", vm=False)
    assert machine is not None
    assert machine["spec"]["host"] == there.name
    conn = libvirt.open(there.uri)
    try:
        assert conn.lookupByUUIDString(moved.uid).state()[0] == libvirt.VIR_DOMAIN_RUNNING
    finally:
        conn.close()
