"""A migration's passes on the source's and the target's daemons, over in-memory doubles: the
relay through the status from acceptance to the end, a refusal, and a failed copy cleaned up.

The doubles: one fake libvirt per host (the copy moves the domain from one to the other, as
libvirt's peer-to-peer migration with UNDEFINE_SOURCE and PERSIST_DEST does) and a store that
merges status patches as the API server does.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import threading
from typing import Any

from libvirt_provider import constants as c
from libvirt_provider import naming
from libvirt_provider.driver.types import DomainState, HostFacts
from libvirt_provider.errors import PermanentError
from libvirt_provider.machine.reconciler import Incoming
from libvirt_provider.migration.credentials import CredentialsProblemError
from libvirt_provider.migration.limits import MigrationLimits
from libvirt_provider.migration.reconciler import MigrationReconciler
from libvirt_provider.migration.store import MigrationKey
from tests.doubles.hypervisor import FakeDomain, FakeHypervisor

NS, UID = "ns", "0b5c8b6e-4c55-4b8e-9d3c-1e0c1c0c0c01"
DOMAIN = naming.domain_name(NS, "web", UID)
POOL = "default"


@dataclasses.dataclass
class MigratingHypervisor(FakeHypervisor):
    """A fake host whose `migrate` sends the domain to `peer`."""

    peer: FakeHypervisor | None = None
    fail_copy: PermanentError | None = None
    # Set: the copy blocks until abort_job (a stalled job) and libvirt's figures stay these.
    stalled: dict[str, int] | None = None
    aborted: threading.Event = dataclasses.field(default_factory=threading.Event)
    migrated: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    auto_converge: list[bool] = dataclasses.field(default_factory=list)

    def migratable_xml(self, uuid: str, *, inactive: bool = False) -> str:
        return self.domain_xml(uuid, inactive=inactive)

    # A paused incoming domain the failed copy leaves on the peer (its libvirtd gone meanwhile).
    leave_incoming: bool = False
    copying: bool = False

    def migrate(
        self, uuid: str, *, uri: str, dest_xml: str, persist_xml: str, auto_converge: bool = False
    ) -> None:
        self.auto_converge.append(auto_converge)
        self.migrated.append((uuid, uri, dest_xml))
        self.copying = True
        try:
            self._copy(uuid, dest_xml, persist_xml)
        finally:
            self.copying = False

    def _copy(self, uuid: str, dest_xml: str, persist_xml: str) -> None:
        if self.stalled is not None:
            assert self.aborted.wait(10), "the stalled job was never aborted"
            raise PermanentError("operation aborted: migration out job: canceled by client")
        if self.fail_copy is not None:
            if self.leave_incoming:
                assert self.peer is not None
                dom = self.domains[uuid]
                self.peer.domains[uuid] = dataclasses.replace(
                    dom, state=DomainState.PAUSED, live_xml=dest_xml, persistent=False
                )
            raise self.fail_copy
        assert self.peer is not None
        dom = self.domains.pop(uuid)
        self.peer.domains[uuid] = dataclasses.replace(dom, xml=persist_xml, live_xml=dest_xml)

    def job_stats(self, uuid: str) -> dict[str, int] | None:
        return dict(self.stalled) if self.stalled is not None and self.copying else None

    def completed_job_stats(self, uuid: str) -> dict[str, int] | None:
        if uuid not in self.domains:
            return None
        return {"time_elapsed": 4000, "downtime": 120, "memory_total": 100, "memory_processed": 40}

    def abort_job(self, uuid: str) -> None:
        self.aborted.set()


def _host(name: str) -> MigratingHypervisor:
    facts = HostFacts(
        hostname=name,
        arch="x86_64",
        domain_types=frozenset({"qemu"}),
        pools=frozenset({POOL}),
        networks=frozenset({"default"}),
    )
    return MigratingHypervisor(facts=facts)


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


class Store:
    """The API server as the migration's passes use it: objects by kind, merge patches."""

    def __init__(self) -> None:
        self.migrations: dict[str, dict[str, Any]] = {}
        self.machines: dict[str, dict[str, Any]] = {}
        self.hosts: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str, bool]] = []
        self.silent: set[str] = set()

    def get_migration(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.migrations.get(name))

    def list_migrations(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(m) for m in self.migrations.values()]

    def get_machine(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.machines.get(name))

    def get_virtual_machine(self, namespace: str, name: str) -> dict[str, Any] | None:
        return {"metadata": {"name": name}, "spec": {}}

    def get_host(self, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.hosts.get(name))

    def list_hosts(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(h) for h in self.hosts.values()]

    def heartbeats(self) -> dict[str, dt.datetime]:
        """Every host's daemon renewed its heartbeat just now, but those in `silent`."""
        now = dt.datetime.now(dt.UTC)
        return {name: now for name in self.hosts if name not in self.silent}

    def patch_migration_status(self, obj: dict[str, Any], status: dict[str, Any]) -> Any:
        stored = self.migrations[obj["metadata"]["name"]]
        _merge(stored.setdefault("status", {}), status)
        return copy.deepcopy(stored)

    def set_migration_finalizers(self, obj: dict[str, Any], finalizers: list[str]) -> Any:
        stored = self.migrations[obj["metadata"]["name"]]
        stored["metadata"]["finalizers"] = list(finalizers)
        return copy.deepcopy(stored)

    def patch_machine_status(
        self, obj: dict[str, Any], status: dict[str, Any], *, conditional: bool = False
    ) -> Any:
        stored = self.machines[obj["metadata"]["name"]]
        _merge(stored.setdefault("status", {}), status)
        return copy.deepcopy(stored)

    def move_machine(self, obj: dict[str, Any], host: str) -> Any:
        stored = self.machines[obj["metadata"]["name"]]
        lock = (stored.get("status") or {}).get("migration") or {}
        assert lock.get("target") == host, "the CRD's rule admits only the locked target"
        stored["spec"]["host"] = host
        stored["metadata"]["labels"][c.HOST_LABEL] = host
        return copy.deepcopy(stored)

    def event(self, obj: Any, *, reason: str, message: str, warning: bool = False) -> None:
        self.events.append((reason, message, warning))


def _ready_host(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": spec,
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "offers": {"networks": ["default"], "pools": [POOL]},
        },
    }


def _world(*, target: str = "b") -> tuple[Store, MigratingHypervisor, MigratingHypervisor]:
    store = Store()
    store.hosts = {"a": _ready_host("a"), "b": _ready_host("b")}
    store.machines["web"] = {
        "kind": c.MACHINE_KIND,
        "metadata": {"name": "web", "namespace": NS, "uid": UID, "labels": {c.HOST_LABEL: "a"}},
        "spec": {"host": "a"},
        "status": {
            "powerState": "PoweredOn",
            "providerID": f"libvirt://a/{UID}",
            "providerMetadata": {"host": "a", "domainName": DOMAIN},
        },
    }
    store.migrations["m"] = {
        "kind": c.MIGRATION_KIND,
        "metadata": {"name": "m", "namespace": NS, "generation": 1},
        "spec": {"machineName": "web", "targetHost": target},
    }
    a, b = _host("a"), _host("b")
    a.peer = b
    xml = (
        f"<domain type='qemu'><name>{DOMAIN}</name><uuid>{UID}</uuid><devices>"
        f"<disk type='volume' device='disk'><source pool='{POOL}' volume='{DOMAIN}--boot.qcow2'/>"
        "<target dev='vda'/></disk>"
        "<interface type='network'><source network='default'/></interface>"
        "</devices></domain>"
    )
    a.domains[UID] = FakeDomain(
        uuid=UID, name=DOMAIN, xml=xml, state=DomainState.RUNNING, live_xml=xml
    )
    a.add_volume(POOL, f"{DOMAIN}--boot.qcow2")
    return store, a, b


def _daemons(
    store: Store,
    a: MigratingHypervisor,
    b: MigratingHypervisor,
    limits: MigrationLimits | None = None,
) -> dict[str, MigrationReconciler]:
    def prepare(obj: dict[str, Any]) -> Incoming:
        info = b.add_volume(POOL, f"{DOMAIN}--boot.qcow2")
        return Incoming(volumes=[(POOL, info.name, info.path)])

    def cannot(obj: dict[str, Any]) -> Incoming:
        raise AssertionError("the source never prepares")

    common = {
        "store": store,
        "migration_uri": "qemu+tls://x/system",
        "progress_seconds": 0.01,
        "limits": limits,
    }
    return {
        "a": MigrationReconciler(
            hypervisor=a, host="a", prepare=cannot, pkipath="/pki/a", **common
        ),  # type: ignore[arg-type]
        "b": MigrationReconciler(hypervisor=b, host="b", prepare=prepare, **common),  # type: ignore[arg-type]
    }


def _settle(daemons: dict[str, MigrationReconciler], rounds: int = 8) -> None:
    """Each daemon passes the migration in turn, as watch events would have them do."""
    for _ in range(rounds):
        for daemon in daemons.values():
            daemon.reconcile(MigrationKey(NS, "m"))


def test_the_machine_moves_from_daemon_to_daemon_through_the_status() -> None:
    store, a, b = _world()
    _settle(_daemons(store, a, b))
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_SUCCEEDED, status
    assert (status["source"], status["target"]) == ("a", "b")
    assert status["result"]["downtimeMilliseconds"] == 120
    assert status["conditions"][0]["reason"] == c.MIGRATION_REASON_SUCCEEDED
    # The copy went to the target's address with the source's credentials, onto its volume.
    (uid, uri, dest), *_ = a.migrated
    assert (uid, uri) == (UID, "qemu+tls://x/system?pkipath=/pki/a")
    prepared = b.find_volume(POOL, f"{DOMAIN}--boot.qcow2")
    assert prepared is not None
    assert f'<source file="{prepared.path}"/>' in dest, dest
    # The domain runs on the target only; the source holds no volume of it.
    assert UID in b.domains
    assert UID not in a.domains
    assert a.volume_names(POOL) == []
    machine = store.machines["web"]
    assert machine["spec"]["host"] == "b"
    assert machine["metadata"]["labels"][c.HOST_LABEL] == "b"
    assert machine["status"]["providerID"] == f"libvirt://b/{UID}"
    assert "migration" not in machine["status"]
    assert c.MIGRATION_FINALIZER in store.migrations["m"]["metadata"]["finalizers"]


def test_a_refused_migration_locks_nothing_and_prepares_nothing() -> None:
    store, a, b = _world()
    store.hosts["b"]["spec"] = {"unschedulable": True}
    _settle(_daemons(store, a, b))
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_FAILED
    assert status["conditions"][0]["reason"] == c.MIGRATION_REASON_TARGET_CORDONED
    assert (c.MIGRATION_REASON_TARGET_CORDONED, status["conditions"][0]["message"], True) in (
        store.events
    )
    assert "migration" not in store.machines["web"]["status"]
    assert b.volume_names(POOL) == []
    assert not store.migrations["m"]["metadata"].get("finalizers")


def test_a_failed_copy_leaves_the_machine_running_and_nothing_on_the_target() -> None:
    store, a, b = _world()
    a.fail_copy = PermanentError("the link went down")
    _settle(_daemons(store, a, b))
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_FAILED
    assert "the link went down" in status["conditions"][0]["message"]
    assert status["targetCleaned"] is True
    assert b.volume_names(POOL) == []
    assert a.domains[UID].state is DomainState.RUNNING
    assert store.machines["web"]["spec"]["host"] == "a"
    assert "migration" not in store.machines["web"]["status"]
    # Deleted now, the source lets it go.
    store.migrations["m"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    _settle(_daemons(store, a, b), rounds=1)
    assert store.migrations["m"]["metadata"]["finalizers"] == []


def test_a_failed_migration_whose_target_host_is_gone_for_good_is_released_with_a_warning() -> None:
    """The target's daemon never cleans up (its host is lost): the deleted migration waits for it
    while the LibvirtHost exists; once an admin deletes the host, the source releases it and says
    which volumes may be left there."""
    store, a, b = _world()
    a.fail_copy = PermanentError("the target's libvirtd is gone")
    daemons = _daemons(store, a, b)
    for _ in range(4):
        daemons["a"].reconcile(MigrationKey(NS, "m"))
        if store.migrations["m"].get("status", {}).get("phase") == c.MIGRATION_PHASE_PREPARING:
            daemons["b"].reconcile(MigrationKey(NS, "m"))  # prepares, then never again
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_FAILED, status
    assert not status.get("targetCleaned")
    store.migrations["m"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    # Nothing is watched that would say the host went: the source looks again by itself.
    waiting = daemons["a"].reconcile(MigrationKey(NS, "m"))
    assert waiting.requeue_after == c.MIGRATION_TARGET_GONE_RECHECK_SECONDS
    assert store.migrations["m"]["metadata"]["finalizers"] == [c.MIGRATION_FINALIZER]
    del store.hosts["b"]
    daemons["a"].reconcile(MigrationKey(NS, "m"))
    assert store.migrations["m"]["metadata"]["finalizers"] == []
    gone = [e for e in store.events if e[0] == c.EVENT_MIGRATION_TARGET_GONE]
    assert len(gone) == 1, store.events
    _reason, message, warning = gone[0]
    assert warning
    assert f"{POOL}/{DOMAIN}--boot.qcow2" in message
    assert "host b no longer exists" in message


def test_without_a_target_the_other_host_is_chosen() -> None:
    store, a, b = _world()
    del store.migrations["m"]["spec"]["targetHost"]
    for host in store.hosts.values():
        host["status"]["allocatable"] = {"cpus": 8, "memory": "16Gi"}
        host["status"]["capacity"] = {"pools": [{"name": POOL, "available": "100Gi"}]}
    now = dt.datetime.now(dt.UTC)
    store.heartbeats = lambda: {"a": now, "b": now}  # type: ignore[method-assign]
    _settle(_daemons(store, a, b))
    status = store.migrations["m"]["status"]
    assert (status["phase"], status["target"]) == (c.MIGRATION_PHASE_SUCCEEDED, "b"), status
    assert any(reason == c.EVENT_MIGRATION_SCHEDULED for reason, _, _ in store.events)


def _running_elsewhere(store: Store, name: str, source: str) -> None:
    store.migrations[name] = {
        "kind": c.MIGRATION_KIND,
        "metadata": {"name": name, "namespace": NS, "generation": 1},
        "spec": {"machineName": "other"},
        "status": {"phase": c.MIGRATION_PHASE_MIGRATING, "source": source, "target": "b"},
    }


def test_over_the_hosts_limit_it_waits_with_the_reason_then_starts_when_a_slot_frees() -> None:
    store, a, b = _world()
    _running_elsewhere(store, "busy", "a")
    daemons = _daemons(store, a, b, MigrationLimits(per_host=1))
    outcome = daemons["a"].reconcile(MigrationKey(NS, "m"))
    assert outcome.requeue_after == c.MIGRATION_SLOT_RECHECK_SECONDS
    _settle(daemons, rounds=3)
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_PENDING
    cond = status["conditions"][0]
    assert cond["reason"] == c.MIGRATION_REASON_HOST_LIMIT
    assert f"{NS}/busy" in cond["message"]
    # Nothing was locked or prepared; one Event however often it looked.
    assert "migration" not in store.machines["web"]["status"]
    assert b.volume_names(POOL) == []
    assert [r for r, _, _ in store.events].count(c.MIGRATION_REASON_HOST_LIMIT) == 1
    assert daemons["a"].waiting() == [MigrationKey(NS, "m")]
    store.migrations["busy"]["status"]["phase"] = c.MIGRATION_PHASE_SUCCEEDED
    _settle(daemons)
    assert store.migrations["m"]["status"]["phase"] == c.MIGRATION_PHASE_SUCCEEDED
    assert daemons["a"].waiting() == []


def test_over_the_clusters_limit_it_waits_for_any_hosts_migration() -> None:
    store, a, b = _world()
    _running_elsewhere(store, "x1", "c")
    _running_elsewhere(store, "x2", "d")
    _settle(_daemons(store, a, b, MigrationLimits(per_host=2, per_cluster=2)), rounds=2)
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_PENDING
    assert status["conditions"][0]["reason"] == c.MIGRATION_REASON_CLUSTER_LIMIT


def test_a_refusal_is_not_held_back_by_a_limit() -> None:
    store, a, b = _world()
    store.hosts["b"]["spec"] = {"unschedulable": True}
    _running_elsewhere(store, "busy", "a")
    _settle(_daemons(store, a, b, MigrationLimits(per_host=1)), rounds=1)
    assert store.migrations["m"]["status"]["phase"] == c.MIGRATION_PHASE_FAILED


def test_a_copy_without_progress_is_aborted_and_the_machine_stays_on_its_source() -> None:
    store, a, b = _world()
    a.stalled = {"memory_total": 2**28, "memory_remaining": 2**27, "memory_bps": 1}
    limits = MigrationLimits(no_progress_seconds=0.05, deadline_seconds_per_gib=1000)
    _settle(_daemons(store, a, b, limits))
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_FAILED, status
    cond = status["conditions"][0]
    assert cond["reason"] == c.MIGRATION_REASON_NO_PROGRESS
    assert "128.0 MiB of memory were left" in cond["message"]
    assert "keeps running on host a" in cond["message"]
    assert a.aborted.is_set()
    # The cancel path's cleanup: the target's prepared volumes are gone, the lock released.
    assert status["targetCleaned"] is True
    assert b.volume_names(POOL) == []
    assert a.domains[UID].state is DomainState.RUNNING
    assert store.machines["web"]["spec"]["host"] == "a"
    assert "migration" not in store.machines["web"]["status"]


def test_a_copy_past_its_deadline_is_aborted() -> None:
    store, a, b = _world()
    # Progressing all the time, but 256 MiB at 0.1 s per GiB is due after 0.025 s.
    left = iter(range(2**28, 0, -(2**20)))

    a.stalled = {"memory_total": 2**28, "memory_remaining": 2**28}
    real_stats = a.job_stats
    a.job_stats = lambda uuid: (  # type: ignore[method-assign]
        {**stats, "memory_remaining": next(left)} if (stats := real_stats(uuid)) else None
    )
    limits = MigrationLimits(no_progress_seconds=1000, deadline_seconds_per_gib=0.1)
    _settle(_daemons(store, a, b, limits))
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_FAILED, status
    assert status["conditions"][0]["reason"] == c.MIGRATION_REASON_DEADLINE_EXCEEDED
    assert "0.1 s per GiB" in status["conditions"][0]["message"]
    assert b.volume_names(POOL) == []
    assert UID in a.domains


def test_auto_converge_is_asked_of_libvirt_only_when_the_spec_says_so() -> None:
    store, a, b = _world()
    _settle(_daemons(store, a, b))
    assert a.auto_converge == [False]
    store, a, b = _world()
    store.migrations["m"]["spec"]["autoConverge"] = True
    _settle(_daemons(store, a, b))
    assert a.auto_converge == [True]
    assert store.migrations["m"]["status"]["phase"] == c.MIGRATION_PHASE_SUCCEEDED


def test_a_migration_waiting_for_a_slot_whose_machine_goes_is_failed() -> None:
    store, a, b = _world()
    _running_elsewhere(store, "busy", "a")
    daemons = _daemons(store, a, b, MigrationLimits(per_host=1))
    _settle(daemons, rounds=1)
    assert store.migrations["m"]["status"]["phase"] == c.MIGRATION_PHASE_PENDING
    del store.machines["web"]
    _settle(daemons, rounds=1)
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_FAILED
    assert status["conditions"][0]["reason"] == c.MIGRATION_REASON_MACHINE_NOT_FOUND
    assert daemons["a"].waiting() == []


def _prepared(store: Store, a: MigratingHypervisor, b: MigratingHypervisor) -> None:
    """Accepted by the source and prepared by the target: the copy is next."""
    daemons = _daemons(store, a, b)
    daemons["a"].reconcile(MigrationKey(NS, "m"))
    daemons["b"].reconcile(MigrationKey(NS, "m"))
    assert store.migrations["m"]["status"]["preparedVolumes"]


def test_a_restarted_source_daemon_follows_the_copy_libvirt_still_runs() -> None:
    """Killed mid-copy, the daemon left libvirt's peer-to-peer job running; started again it
    reports the job's progress instead of starting a second copy (which libvirt refuses), and
    hands the machine over once libvirt moved the domain."""
    store, a, b = _world()
    _prepared(store, a, b)
    store.migrations["m"]["status"]["phase"] = c.MIGRATION_PHASE_MIGRATING
    left = iter([3, 2, 1])

    def job_stats(uuid: str) -> dict[str, int] | None:
        remaining = next(left, None)
        if remaining is None:
            # libvirt's job ends: the domain runs on the target, undefined here.
            b.domains[uuid] = a.domains.pop(uuid)
            return None
        return {"memory_total": 8, "memory_remaining": remaining}

    a.job_stats = job_stats  # type: ignore[method-assign]
    _settle(_daemons(store, a, b))
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_SUCCEEDED, status
    assert a.migrated == [], "a second copy was started"
    assert status["result"]["memoryTotal"] == 100
    assert UID in b.domains
    assert UID not in a.domains
    assert store.machines["web"]["spec"]["host"] == "b"
    assert a.volume_names(POOL) == []


def test_a_followed_copy_that_ends_with_the_domain_here_fails_truthfully() -> None:
    store, a, b = _world()
    _prepared(store, a, b)
    store.migrations["m"]["status"]["phase"] = c.MIGRATION_PHASE_MIGRATING
    left = iter([2, 1])
    a.job_stats = lambda uuid: (  # type: ignore[method-assign]
        None if (r := next(left, None)) is None else {"memory_total": 8, "memory_remaining": r}
    )
    _settle(_daemons(store, a, b))
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_FAILED, status
    message = status["conditions"][0]["message"]
    assert "ended with the domain still on host a" in message, message
    assert a.migrated == []
    assert status["targetCleaned"] is True
    assert b.volume_names(POOL) == []
    assert "migration" not in store.machines["web"]["status"]


def test_deleting_the_machine_mid_copy_aborts_it_and_cancels_the_migration() -> None:
    store, a, b = _world()
    a.stalled = {"memory_total": 2**28, "memory_remaining": 2**27}
    real_stats = a.job_stats

    def job_stats(uuid: str) -> dict[str, int] | None:
        if a.copying:
            store.machines["web"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        return real_stats(uuid)

    a.job_stats = job_stats  # type: ignore[method-assign]
    _settle(_daemons(store, a, b))
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_CANCELLED, status
    assert status["conditions"][0]["reason"] == c.MIGRATION_REASON_MACHINE_DELETED
    assert a.aborted.is_set()
    assert status["targetCleaned"] is True
    assert b.volume_names(POOL) == []
    # The lock released: the machine's deletion goes on where its domain is.
    assert "migration" not in store.machines["web"]["status"]
    assert store.machines["web"]["spec"]["host"] == "a"


def test_a_machine_deleted_before_the_copy_is_not_copied() -> None:
    store, a, b = _world()
    _prepared(store, a, b)
    store.machines["web"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    _settle(_daemons(store, a, b))
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_CANCELLED, status
    assert status["conditions"][0]["reason"] == c.MIGRATION_REASON_MACHINE_DELETED
    assert a.migrated == []
    assert b.volume_names(POOL) == []


def test_the_target_removes_the_paused_incoming_domain_a_failed_copy_left() -> None:
    """The source's libvirtd failed the job when the target's went away; the target's qemu
    still holds the half-copied guest, paused. It is no copy of the machine to keep."""
    store, a, b = _world()
    a.fail_copy = PermanentError("End of file while reading data: Input/output error")
    a.leave_incoming = True
    _settle(_daemons(store, a, b))
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_FAILED, status
    assert status["targetCleaned"] is True
    assert UID not in b.domains
    assert b.volume_names(POOL) == []
    assert a.domains[UID].state is DomainState.RUNNING


# -- the source's migration credentials (--migration-secret) -------------------------------


def test_a_source_without_credentials_refuses_before_locking_or_preparing() -> None:
    store, a, b = _world()
    daemons = _daemons(store, a, b)
    detail = "Secret vm-api-system/migration-tls does not exist (--migration-secret)"

    def missing() -> str:
        raise CredentialsProblemError(f"host a has no usable credentials: {detail}")

    daemons["a"]._credentials = missing
    _settle(daemons)
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_FAILED
    condition = status["conditions"][0]
    assert condition["reason"] == c.MIGRATION_REASON_CREDENTIALS_MISSING
    assert detail in condition["message"]
    assert (c.MIGRATION_REASON_CREDENTIALS_MISSING, condition["message"], True) in store.events
    assert a.migrated == []
    assert "migration" not in store.machines["web"]["status"]
    assert b.volume_names(POOL) == []
    assert not store.migrations["m"]["metadata"].get("finalizers")


def test_credentials_gone_between_accept_and_copy_fail_it_and_the_target_cleans_up() -> None:
    store, a, b = _world()
    daemons = _daemons(store, a, b)
    asked: list[int] = []

    def gone_after_the_accept() -> str:
        asked.append(1)
        if len(asked) > 1:
            raise CredentialsProblemError("host a has no usable credentials: tls.key is gone")
        return "/pki/a"

    daemons["a"]._credentials = gone_after_the_accept
    _settle(daemons)
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_FAILED
    assert status["conditions"][0]["reason"] == c.MIGRATION_REASON_CREDENTIALS_MISSING
    assert status["targetCleaned"] is True
    assert a.migrated == []
    assert b.volume_names(POOL) == []
    assert store.machines["web"]["spec"]["host"] == "a"
    assert "migration" not in store.machines["web"]["status"]


def test_each_copy_uses_the_folder_the_credentials_give_then() -> None:
    store, a, b = _world()
    daemons = _daemons(store, a, b)
    daemons["a"]._credentials = lambda: "/run/pki-from-secret"
    _settle(daemons)
    assert store.migrations["m"]["status"]["phase"] == c.MIGRATION_PHASE_SUCCEEDED
    assert a.migrated[0][1] == "qemu+tls://x/system?pkipath=/run/pki-from-secret"


def test_an_api_server_that_does_not_answer_retries_the_pass_and_refuses_nothing() -> None:
    store, a, b = _world()
    daemons = _daemons(store, a, b)

    def unreachable() -> str:
        raise PermanentError("reading Secret vm-api-system/migration-tls: 500")

    daemons["a"]._credentials = unreachable
    _settle(daemons, rounds=2)
    assert "status" not in store.migrations["m"] or not store.migrations["m"]["status"].get("phase")
    assert "migration" not in store.machines["web"]["status"]


class _ClaimingElsewhere(Store):
    """Another host's daemon writes a claim for its own migration `x` the moment this one
    writes its claim: both counted the running migrations before either claim was there."""

    def patch_migration_status(self, obj: dict[str, Any], status: dict[str, Any]) -> Any:
        if status.get("slotClaimedAt") and "x" not in self.migrations:
            self.migrations["x"] = {
                "kind": c.MIGRATION_KIND,
                "metadata": {"name": "x", "namespace": NS, "generation": 1},
                "spec": {"machineName": "other"},
                "status": {
                    "phase": c.MIGRATION_PHASE_PENDING,
                    "slotClaimedAt": status["slotClaimedAt"],
                },
            }
        return super().patch_migration_status(obj, status)


def test_a_claim_that_meets_another_hosts_claim_is_withdrawn_and_tried_again_soon() -> None:
    store, a, b = _world()
    claiming = _ClaimingElsewhere()
    claiming.__dict__.update(store.__dict__)
    _running_elsewhere(claiming, "busy", "c")
    limits = MigrationLimits(per_host=2, per_cluster=2)
    daemons = _daemons(claiming, a, b, limits)
    source = MigrationReconciler(
        store=claiming,  # type: ignore[arg-type]
        hypervisor=a,  # type: ignore[arg-type]
        host="a",
        prepare=lambda _obj: Incoming(volumes=[]),
        migration_uri="qemu+tls://x/system",
        pkipath="/pki/a",
        limits=limits,
        collision_delay=lambda: 2.5,
    )
    outcome = source.reconcile(MigrationKey(NS, "m"))
    assert outcome.requeue_after == 2.5
    status = claiming.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_PENDING
    assert "slotClaimedAt" not in status
    assert status["conditions"][0]["reason"] == c.MIGRATION_REASON_CLUSTER_LIMIT
    assert f"{NS}/x" in status["conditions"][0]["message"]
    assert "migration" not in claiming.machines["web"]["status"]
    assert b.volume_names(POOL) == []
    # The other claim withdrawn (its own count saw this one): the next try starts, and the
    # claim is gone from the started migration's status.
    del claiming.migrations["x"]["status"]["slotClaimedAt"]
    claiming.migrations["x"]["status"]["phase"] = c.MIGRATION_PHASE_FAILED
    source.reconcile(MigrationKey(NS, "m"))
    status = claiming.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_PREPARING, status
    assert "slotClaimedAt" not in status
    _settle(daemons)
    assert claiming.migrations["m"]["status"]["phase"] == c.MIGRATION_PHASE_SUCCEEDED


def test_a_named_target_whose_heartbeat_stopped_is_refused_though_its_status_says_ready() -> None:
    """A daemon that died leaves `Ready` True in its host's status; its heartbeat tells."""
    store, a, b = _world()
    store.silent = {"b"}
    _settle(_daemons(store, a, b), rounds=1)
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_FAILED, status
    assert status["conditions"][0]["reason"] == c.MIGRATION_REASON_TARGET_NOT_READY
    assert "migration" not in store.machines["web"]["status"]


def test_a_target_that_stops_serving_before_it_prepared_ends_the_migration() -> None:
    store, a, b = _world()
    daemons = _daemons(store, a, b)
    key = MigrationKey(NS, "m")
    daemons["a"].reconcile(key)
    assert store.migrations["m"]["status"]["phase"] == c.MIGRATION_PHASE_PREPARING
    assert store.machines["web"]["status"]["migration"]["name"] == "m"
    # While the target serves, the source looks again now and then.
    waiting = daemons["a"].reconcile(key)
    assert waiting.requeue_after == c.MIGRATION_TARGET_WATCH_SECONDS
    # The target's daemon dies before it prepared anything: its heartbeat stops.
    store.silent = {"b"}
    daemons["a"].reconcile(key)
    status = store.migrations["m"]["status"]
    assert status["phase"] == c.MIGRATION_PHASE_FAILED, status
    cond = status["conditions"][0]
    assert cond["reason"] == c.MIGRATION_REASON_TARGET_NOT_READY
    assert "before it prepared the machine's volumes" in cond["message"]
    assert "keeps running on host a" in cond["message"]
    daemons["a"].reconcile(key)
    assert "migration" not in store.machines["web"]["status"]
    assert a.domains[UID].state is DomainState.RUNNING
    # Back, the target's daemon finds an ended migration it prepared nothing for.
    store.silent = set()
    _settle(daemons, rounds=2)
    assert b.volume_names(POOL) == []
    assert store.machines["web"]["spec"]["host"] == "a"
