"""Faults in the middle of a live migration (issue 27, "Faults"): each one lands while a copy,
slowed with `migrateSetMaxSpeed` on the source's domain, is under way between two lab hosts.

Why: a migration is a relay between two daemons, two libvirtds and a network link, through the
API server; any of them can go away mid-copy. Whatever goes, afterwards exactly one domain of the
machine runs (on the source or the target), the other host holds no volume of it, the migration
ends with a phase and a reason that say what happened, and the machine is Ready again without
anyone's help (docs/migration.md, "Faults", has the table this module proves):

- the target cordoned: the copy finishes (a cordon keeps new machines away; it moves nothing);
- the source's daemon killed (SIGKILL) and started again: libvirt carries the copy on alone, the
  restarted daemon follows the job it finds and hands the machine over: `Succeeded`;
- the target's libvirtd killed, then started again as its service manager would: `Failed`
  (`MigrationFailed`), the machine runs on at its source, the target deletes what it prepared;
- the migration link taken down, then up again: `Failed` (`MigrationFailed`) once it is back,
  as above (a link that stays down holds libvirt's job until the kernel gives its connections
  up: docs/migration.md);
- the target's daemon killed before it prepares (its heartbeat still fresh, so the source
  accepts): `Failed` (`TargetNotReady`) once the heartbeat is older than the grace, the machine
  unlocked on its source;
- the target lost for good (its daemon and libvirtd killed, never started again): `Failed`, the
  machine runs on at its source; deleted, the migration waits for the target's cleanup until
  its LibvirtHost is deleted, then is released with a `TargetGone` warning naming what is left
  there;
- the VM deleted: the copy is aborted, `Cancelled` (`MachineDeleted`), and nothing of the
  machine is left anywhere;
- the API server restarted (marker `apiserver_restart`: the second group of `make test`): the
  copy goes on, the daemons resume, `Succeeded`.

Two busybox guests: `roamer` moves back and forth through the cases; `doomed` is deleted.

Cost: 98 s, 124 s, 143 s and 128 s in four runs here, beside two other labs (the two guests
booted together, 16-36 s; the link case 32-39 s, the API server's restart 14-25 s, each other
case 4-16 s; the lost target 10-12 s, the target dying before it prepares 22 s (the
module's 20 s heartbeat grace), with the module 117-127 s).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import libvirt
import pytest
from kubernetes import client

from libvirt_provider import constants as c
from tests.e2e.migration.moves import (
    PLURAL,
    create_migration,
    delete_migrations,
    migration,
    migration_events,
    pool_volumes,
    read_migration,
    wait_ended,
)
from tests.support.daemons import Fleet
from tests.support.factories import pair
from tests.support.hosts import HOSTS_PLURAL
from tests.support.kube import GROUP, VM_GROUP, V, create, domain_of, get, wait_ready
from tests.support.lab_access import (
    LAB_SCRIPT,
    LabHost,
    LabInfo,
    host_libvirtd,
    kill_host_libvirtd,
    migration_link,
)
from tests.support.waiting import eventually

# A slowed copy must outlast the fault and the wait for its effect: 600 s per GiB gives a busybox
# guest's ~257 MiB 150 s (at 1 MiB/s, ~100 MiB to send take ~100 s).
# Half the usual heartbeat grace: the case of a target that dies before preparing waits it out.
HEARTBEAT_GRACE = 20
MIGRATION_DAEMON_ARGS = (
    "--migration-deadline-per-gib=600",
    f"--heartbeat-grace={HEARTBEAT_GRACE}",
)
UNLIMITED_MIB_S = 1 << 20


@dataclass(frozen=True)
class Guests:
    ns: str
    hosts: tuple[LabHost, LabHost]
    uids: dict[str, str]
    domains: dict[str, str]


@pytest.fixture(scope="module")
def guests(fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str) -> Iterator[Guests]:
    """`roamer` and `doomed`, running busybox machines on the first host, booted together."""
    source = lab.hosts[0]
    docs = []
    for name in ("roamer", "doomed"):
        vm, lm = pair(ns, name)
        lm["metadata"]["labels"][c.HOST_LABEL] = source.name
        lm["spec"]["host"] = source.name
        docs += [vm, lm]
    create(api_client, docs)
    try:
        uids, domains = {}, {}
        for name in ("roamer", "doomed"):
            wait_ready(api_client, ns, name, what=f"{name} Ready on its first host")
            machine = get(api_client, ns, name, vm=False)
            assert machine is not None
            uids[name] = str(machine["metadata"]["uid"])
            domains[name] = domain_of(api_client, ns, name)
        yield Guests(ns=ns, hosts=(lab.hosts[0], lab.hosts[1]), uids=uids, domains=domains)
    finally:
        delete_migrations(api_client, ns)


def _ends(guests: Guests, api: client.ApiClient, name: str) -> tuple[LabHost, LabHost]:
    """The machine's host now, and the other one."""
    machine = get(api, guests.ns, name, vm=False)
    assert machine is not None
    first, second = guests.hosts
    return (first, second) if machine["spec"]["host"] == first.name else (second, first)


def _reason(status: dict[str, Any]) -> str:
    cond = next(
        x for x in status.get("conditions") or [] if x["type"] == c.MIGRATION_CONDITION_SUCCEEDED
    )
    return str(cond["reason"])


def _running_on(host: LabHost, uid: str) -> bool | None:
    """True: the domain runs there; False: it is there, not running; None: not there."""
    conn = libvirt.open(host.uri)
    try:
        try:
            dom = conn.lookupByUUIDString(uid)
        except libvirt.libvirtError as err:
            if err.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                return None
            raise
        return bool(dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING)
    finally:
        conn.close()


def _volumes_on(host: LabHost, lab: LabInfo, domain: str) -> list[str]:
    conn = libvirt.open(host.uri)
    try:
        return pool_volumes(conn, lab, domain)
    finally:
        conn.close()


def _lock(api: client.ApiClient, ns: str, name: str) -> Any:
    return ((get(api, ns, name, vm=False) or {}).get("status") or {}).get("migration")


def assert_only_on(
    guests: Guests, lab: LabInfo, api: client.ApiClient, name: str, host: LabHost
) -> None:
    """Exactly one domain of the machine, running on `host`, which the machine names; the other
    host holds neither a domain nor a volume of it; unlocked and Ready."""
    other = next(h for h in guests.hosts if h.name != host.name)
    uid, domain = guests.uids[name], guests.domains[name]
    assert _running_on(host, uid) is True, f"{name} is not running on {host.name}"
    assert _running_on(other, uid) is None, f"{other.name} still has a domain of {name}"
    eventually(
        lambda: _volumes_on(other, lab, domain) == [],
        timeout=60,
        what=f"{other.name} holding no volume of {name}",
    )
    assert _volumes_on(host, lab, domain), f"{host.name} lost the volumes of {name}"
    machine = get(api, guests.ns, name, vm=False)
    assert machine is not None
    assert machine["spec"]["host"] == host.name
    eventually(
        lambda: _lock(api, guests.ns, name) is None, timeout=60, what=f"{name}'s lock released"
    )
    wait_ready(api, guests.ns, name, what=f"{name} Ready on {host.name}", timeout=120)


@contextmanager
def slowed_copy(
    guests: Guests, api: client.ApiClient, name: str, target: LabHost
) -> Iterator[tuple[str, libvirt.virDomain]]:
    """A migration of `name` to `target`, its copy slowed to 1 MiB/s and under way; yields the
    migration's name and the source's domain (to speed it up again: `full_speed`)."""
    source = next(h for h in guests.hosts if h.name != target.name)
    conn = libvirt.open(source.uri)
    try:
        dom = conn.lookupByUUIDString(guests.uids[name])
        dom.migrateSetMaxSpeed(1, 0)
        mig = f"{name}-{uuid.uuid4().hex[:6]}"
        create_migration(api, migration(guests.ns, mig, name, target.name))
        eventually(
            lambda: (
                ((read_migration(api, guests.ns, mig) or {}).get("status") or {})
                .get("progress", {})
                .get("memoryProcessed")
            ),
            timeout=120,
            what=f"the slowed copy of {name} under way",
        )
        yield mig, dom
    finally:
        full_speed_quietly(conn, guests.uids[name])
        conn.close()


def full_speed(dom: libvirt.virDomain) -> None:
    dom.migrateSetMaxSpeed(UNLIMITED_MIB_S, 0)


def full_speed_quietly(conn: libvirt.virConnect, uid: str) -> None:
    """Back to full speed if the domain is still there (it may have left, or be gone)."""
    with suppress(libvirt.libvirtError):
        conn.lookupByUUIDString(uid).migrateSetMaxSpeed(UNLIMITED_MIB_S, 0)


def _cordon(api: client.ApiClient, host: str, on: bool) -> None:
    client.CustomObjectsApi(api).patch_cluster_custom_object(
        GROUP, V, HOSTS_PLURAL, host, {"spec": {"unschedulable": on}}
    )


def test_cordoning_the_target_mid_copy_lets_the_copy_finish(
    guests: Guests, lab: LabInfo, api_client: client.ApiClient
) -> None:
    """A cordon keeps new machines off a host; a migration accepted before it is a placement
    made already, so the copy goes on and the machine lands on the cordoned host (a drain of it
    would move it on)."""
    _, there = _ends(guests, api_client, "roamer")
    try:
        with slowed_copy(guests, api_client, "roamer", there) as (mig, dom):
            _cordon(api_client, there.name, True)
            full_speed(dom)
            status = wait_ended(api_client, guests.ns, mig)["status"]
        assert status["phase"] == c.MIGRATION_PHASE_SUCCEEDED, status
        assert status.get("handedOver") is True, status
        assert_only_on(guests, lab, api_client, "roamer", there)
    finally:
        _cordon(api_client, there.name, False)


def test_killing_the_source_daemon_mid_copy_the_restarted_daemon_hands_over(
    guests: Guests, lab: LabInfo, api_client: client.ApiClient, fleet: Fleet
) -> None:
    """SIGKILL of the source's daemon: its libvirtd runs the peer-to-peer job on by itself. The
    daemon started again finds the job still running, follows it (its progress reports resume)
    rather than starting a second copy, and hands the machine over once libvirt finished: the
    truthful end is `Succeeded`."""
    here, there = _ends(guests, api_client, "roamer")
    with slowed_copy(guests, api_client, "roamer", there) as (mig, dom):
        fleet.stop(here.name, kill=True)
        before = (read_migration(api_client, guests.ns, mig) or {})["status"]["progress"]
        fleet.start(here)
        eventually(
            lambda: (
                (s := (read_migration(api_client, guests.ns, mig) or {}).get("status") or {}).get(
                    "phase"
                )
                != c.MIGRATION_PHASE_MIGRATING
                or (s.get("progress") or {}).get("elapsedMilliseconds", 0)
                > before.get("elapsedMilliseconds", 0) + 2000
            ),
            timeout=90,
            what="the restarted daemon reporting the running copy's progress",
        )
        assert dom.jobInfo()[0] != libvirt.VIR_DOMAIN_JOB_NONE, "the copy stopped"
        full_speed(dom)
        status = wait_ended(api_client, guests.ns, mig)["status"]
    assert status["phase"] == c.MIGRATION_PHASE_SUCCEEDED, status
    assert status.get("handedOver") is True, status
    assert_only_on(guests, lab, api_client, "roamer", there)


def test_killing_the_target_libvirtd_mid_copy_fails_it_and_the_target_cleans_up(
    guests: Guests, lab: LabInfo, api_client: client.ApiClient
) -> None:
    """The source's libvirtd loses the target's: libvirt fails the job, the guest runs on at the
    source. The target's libvirtd started again (its service manager's job) finds the half-made
    incoming domain; the target's daemon removes it and the volumes it prepared."""
    here, there = _ends(guests, api_client, "roamer")
    try:
        with slowed_copy(guests, api_client, "roamer", there) as (mig, _dom):
            kill_host_libvirtd(there.name)
            status = wait_ended(api_client, guests.ns, mig, timeout=120)["status"]
        host_libvirtd(there.name, up=True)
        assert status["phase"] == c.MIGRATION_PHASE_FAILED, status
        assert _reason(status) == c.MIGRATION_REASON_MIGRATION_FAILED, status
        eventually(
            lambda: ((read_migration(api_client, guests.ns, mig) or {}).get("status") or {}).get(
                "targetCleaned"
            ),
            timeout=120,
            what="the target's leftovers removed",
        )
        assert_only_on(guests, lab, api_client, "roamer", here)
    finally:
        host_libvirtd(there.name, up=True)


def test_taking_the_link_down_mid_copy_fails_it_once_the_link_is_back(
    guests: Guests, lab: LabInfo, api_client: client.ApiClient
) -> None:
    """Packets between the hosts are lost. The target's libvirtd notices first (libvirt's
    keepalive between the two libvirtds, ~30 s) and drops the incoming domain; the source's job
    waits on qemu, whose TCP connection to the target's disk export waits for the link (or for
    the kernel's retransmissions to give up: see docs/migration.md, "Faults"). With the link
    back, the source's qemu learns that the other end is gone, libvirt fails the job, the guest
    runs on at the source and the target's daemon deletes the volumes it prepared."""
    here, there = _ends(guests, api_client, "roamer")
    try:
        with slowed_copy(guests, api_client, "roamer", there) as (mig, _dom):
            migration_link(there.name, up=False)
            eventually(
                lambda: _running_on(there, guests.uids["roamer"]) is None,
                timeout=120,
                what="the target's libvirtd dropping the incoming domain",
            )
            migration_link(there.name, up=True)
            status = wait_ended(api_client, guests.ns, mig, timeout=120)["status"]
        assert status["phase"] == c.MIGRATION_PHASE_FAILED, status
        assert _reason(status) == c.MIGRATION_REASON_MIGRATION_FAILED, status
        eventually(
            lambda: ((read_migration(api_client, guests.ns, mig) or {}).get("status") or {}).get(
                "targetCleaned"
            ),
            timeout=90,
            what="the target's prepared volumes deleted",
        )
        assert_only_on(guests, lab, api_client, "roamer", here)
    finally:
        migration_link(there.name, up=True)


def test_a_target_whose_daemon_dies_before_it_prepares_ends_the_migration(
    guests: Guests, lab: LabInfo, api_client: client.ApiClient, fleet: Fleet
) -> None:
    """The target's daemon is killed just before the migration is asked for: its heartbeat is
    still fresh, so the source accepts and locks the machine, but nobody prepares the target.
    Once the heartbeat is older than the grace, the source ends the migration (`Failed`,
    `TargetNotReady`) and unlocks the machine, which never stopped running."""
    here, there = _ends(guests, api_client, "roamer")
    uid = guests.uids["roamer"]
    fleet.stop(there.name, kill=True)
    try:
        mig = "orphan-" + uuid.uuid4().hex[:6]
        create_migration(api_client, migration(guests.ns, mig, "roamer", there.name))
        eventually(
            lambda: _lock(api_client, guests.ns, "roamer") is not None,
            timeout=30,
            what="the source accepting and locking the machine",
        )
        status = wait_ended(api_client, guests.ns, mig, timeout=HEARTBEAT_GRACE + 60)["status"]
        assert status["phase"] == c.MIGRATION_PHASE_FAILED, status
        assert _reason(status) == c.MIGRATION_REASON_TARGET_NOT_READY, status
        assert "before it prepared the machine's volumes" in str(status["conditions"]), status
        assert "preparedVolumes" not in status, status
        assert _running_on(here, uid) is True
    finally:
        if there.name not in fleet.daemons:
            fleet.start(there)
    fleet.wait_hosts_ready([there.name])
    assert_only_on(guests, lab, api_client, "roamer", here)


def _remove_leftovers(host: LabHost, uid: str, volumes: list[dict[str, Any]]) -> None:
    """What an admin clears on a host that comes back after being given up: the half-made
    incoming domain and the volumes the `TargetGone` Event named."""
    conn = libvirt.open(host.uri)
    try:
        with suppress(libvirt.libvirtError):
            conn.lookupByUUIDString(uid).destroy()
        for volume in volumes:
            with suppress(libvirt.libvirtError):
                pool = conn.storagePoolLookupByName(str(volume["pool"]))
                pool.refresh(0)
                pool.storageVolLookupByName(str(volume["volume"])).delete(0)
    finally:
        conn.close()


def test_losing_the_target_for_good_mid_copy_fails_it_and_deleting_its_host_releases_it(
    guests: Guests, lab: LabInfo, api_client: client.ApiClient, fleet: Fleet
) -> None:
    """The target's daemon and libvirtd die mid-copy and stay dead. libvirt fails the copy and
    the machine runs on at its source, unlocked. The migration, deleted, waits for the target to
    clean up what it prepared; deleting the target's LibvirtHost (an admin saying the host is
    gone for good) releases it, with a `TargetGone` warning naming the volumes left there."""
    here, there = _ends(guests, api_client, "roamer")
    custom = client.CustomObjectsApi(api_client)
    uid = guests.uids["roamer"]
    prepared: list[dict[str, Any]] = []
    try:
        with slowed_copy(guests, api_client, "roamer", there) as (mig, _dom):
            fleet.stop(there.name, kill=True)
            kill_host_libvirtd(there.name)
            status = wait_ended(api_client, guests.ns, mig, timeout=120)["status"]
        assert status["phase"] == c.MIGRATION_PHASE_FAILED, status
        assert _reason(status) == c.MIGRATION_REASON_MIGRATION_FAILED, status
        prepared = list(status.get("preparedVolumes") or [])
        assert prepared, status
        assert not status.get("targetCleaned"), status
        assert _running_on(here, uid) is True
        eventually(
            lambda: _lock(api_client, guests.ns, "roamer") is None,
            timeout=60,
            what="roamer's lock released while its target is gone",
        )
        custom.delete_namespaced_custom_object(GROUP, V, guests.ns, PLURAL, mig)
        # Held by its finalizer for the target's cleanup, which nothing will do now.
        waiting = read_migration(api_client, guests.ns, mig)
        assert waiting is not None
        assert waiting["metadata"].get("deletionTimestamp"), waiting
        assert c.MIGRATION_FINALIZER in waiting["metadata"]["finalizers"], waiting
        custom.delete_cluster_custom_object(GROUP, V, HOSTS_PLURAL, there.name)
        eventually(
            lambda: read_migration(api_client, guests.ns, mig) is None,
            timeout=90,
            what="the migration released once its target's LibvirtHost is gone",
        )
        gone = [
            e
            for e in client.CoreV1Api(api_client).list_namespaced_event(guests.ns).items
            if e.involved_object.name == mig and e.reason == c.EVENT_MIGRATION_TARGET_GONE
        ]
        assert gone, "no TargetGone Event"
        assert gone[0].type == "Warning", gone
        for volume in prepared:
            assert f"{volume['pool']}/{volume['volume']}" in str(gone[0].message), gone[0].message
    finally:
        host_libvirtd(there.name, up=True)
        _remove_leftovers(there, uid, prepared)
        if there.name not in fleet.daemons:
            fleet.start(there)
    # The host's daemon, started again, makes its LibvirtHost anew.
    fleet.wait_hosts_ready([there.name])
    assert_only_on(guests, lab, api_client, "roamer", here)


def test_deleting_the_vm_mid_copy_cancels_it_and_leaves_nothing_anywhere(
    guests: Guests, lab: LabInfo, api_client: client.ApiClient
) -> None:
    """The machine is going: moving it on is pointless, so the source aborts the copy
    (`Cancelled`, `MachineDeleted`), the target deletes what it prepared, and the machine's
    deletion goes on at its source once the lock is released."""
    ns, uid, domain = guests.ns, guests.uids["doomed"], guests.domains["doomed"]
    _, there = _ends(guests, api_client, "doomed")
    with slowed_copy(guests, api_client, "doomed", there) as (mig, _dom):
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            VM_GROUP, V, ns, "virtualmachines", "doomed"
        )
        status = wait_ended(api_client, ns, mig, timeout=120)["status"]
    assert status["phase"] == c.MIGRATION_PHASE_CANCELLED, status
    assert _reason(status) == c.MIGRATION_REASON_MACHINE_DELETED, status
    assert c.MIGRATION_REASON_MACHINE_DELETED in migration_events(api_client, ns, mig)
    eventually(
        lambda: (
            get(api_client, ns, "doomed", vm=True) is None
            and get(api_client, ns, "doomed", vm=False) is None
        ),
        timeout=120,
        what="the VM and its machine gone",
    )
    for host in guests.hosts:
        assert _running_on(host, uid) is None, f"{host.name} still has the deleted machine"
        eventually(
            lambda host=host: _volumes_on(host, lab, domain) == [],
            timeout=60,
            what=f"{host.name} holding no volume of the deleted machine",
        )


def _api_answers(api: client.ApiClient) -> bool:
    try:
        client.VersionApi(api).get_code(_request_timeout=2)
    except Exception:  # any failure to answer is what is waited for
        return False
    return True


@pytest.mark.apiserver_restart
def test_restarting_the_api_server_mid_copy_the_migration_still_succeeds(
    guests: Guests, lab: LabInfo, api_client: client.ApiClient
) -> None:
    """Every watch and status write fails while the API server is away; libvirt's copy does
    not need it. The source's daemon follows the job through the outage (or, its pass ended by
    the errors, picks it up again) and hands over once the server answers."""
    _, there = _ends(guests, api_client, "roamer")
    with slowed_copy(guests, api_client, "roamer", there) as (mig, dom):
        restart = subprocess.run(
            [sys.executable, str(LAB_SCRIPT), "restart-apiserver"],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert restart.returncode == 0, restart.stdout + restart.stderr
        eventually(lambda: _api_answers(api_client), timeout=60, what="the API server back")
        full_speed(dom)
        status = wait_ended(api_client, guests.ns, mig)["status"]
    assert status["phase"] == c.MIGRATION_PHASE_SUCCEEDED, status
    assert_only_on(guests, lab, api_client, "roamer", there)
