"""The snapshot pass over in-memory fakes: bad input reported with a reason, a running machine's
writes diverted and always merged back, a copy that fails leaves nothing, an interrupted attempt
recovered, and deletion removing exactly the snapshot's volumes."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from libvirt_provider import constants as c
from libvirt_provider.driver.types import (
    DomainRef,
    DomainState,
    DomainStatus,
    HostFacts,
    OverlaySpec,
    PendingOverlay,
    VolumeInfo,
)
from libvirt_provider.errors import (
    GuestAgentUnavailableError,
    NotFoundError,
    PermanentError,
    RetryableError,
    StateConflictError,
)
from libvirt_provider.snapshot.names import pending_overlay_name, snapshot_prefix
from libvirt_provider.snapshot.reconciler import SnapshotReconciler
from libvirt_provider.snapshot.store import Obj, SnapshotKey

HOST = "h1"
NS = "team"
SNAP_UID = "5a5a5a5a-0000-0000-0000-000000000001"
MACHINE_UID = "6b6b6b6b-0000-0000-0000-000000000002"
POOL = "pool"
BOOT = "team_web-0123456789abcdef--boot.qcow2"
DATA = "team_web-0123456789abcdef--data-logs.raw"
KEY = SnapshotKey(NS, "snap")


def _disk(alias: str, target: str, volume: str | None, *, path: str | None = None) -> str:
    source = f"<source file='{path}'/>" if path else f"<source pool='{POOL}' volume='{volume}'/>"
    kind = "file" if path else "volume"
    return (
        f"<disk type='{kind}' device='disk'><driver name='qemu' type='qcow2'/>{source}"
        f"<target dev='{target}' bus='virtio'/><alias name='ua-disk-{alias}'/></disk>"
    )


@dataclass
class FakeHost:
    """The host as the snapshot loop sees it: one domain, one pool."""

    state: DomainState = DomainState.RUNNING
    volumes: dict[str, VolumeInfo] = field(default_factory=dict)
    available: int | None = 1 << 40
    agent: bool = False
    diverted: dict[str, str] = field(default_factory=dict)  # target -> pending overlay path
    calls: list[str] = field(default_factory=list)
    fail_copy: bool = False
    start_during_copy: bool = False
    domain: bool = True
    elsewhere: list[VolumeInfo] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name, size in ((BOOT, 300), (DATA, 100)):
            self.add(name, size)

    def add(self, name: str, allocation: int, backing: str | None = "/pool/base.qcow2") -> None:
        self.volumes[name] = VolumeInfo(
            pool=POOL,
            name=name,
            path=f"/pool/{name}",
            capacity_bytes=1 << 30,
            allocation_bytes=allocation,
            format="qcow2",
            backing_path=backing,
        )

    # DomainControl (the part the snapshot loop uses)
    def status(self, uuid: str) -> DomainStatus:
        if not self.domain:
            raise NotFoundError(uuid)
        return DomainStatus(state=self.state, reason=0, has_managed_save=False)

    def domain_xml(self, uuid: str, *, inactive: bool = False) -> str:
        if not self.domain:
            raise NotFoundError(uuid)
        boot = self.diverted.get("vda")
        data = self.diverted.get("vdb")
        return (
            "<domain><devices>"
            + _disk("boot", "vda", BOOT, path=boot)
            + _disk("data-logs", "vdb", DATA, path=data)
            + "</devices></domain>"
        )

    def lookup(self, *, uuid: str, name: str) -> DomainRef | None:
        return DomainRef(uuid=uuid, name=name)

    # VolumeStore
    def find_volume(self, pool: str, name: str) -> VolumeInfo | None:
        return self.volumes.get(name)

    def volume_names(self, pool: str) -> list[str]:
        return list(self.volumes)

    def list_volumes(self, pool: str) -> list[VolumeInfo]:
        # Every volume is in POOL; the host's other pool holds what `elsewhere` has.
        return list(self.volumes.values()) if pool == POOL else list(self.elsewhere)

    # HostInfo
    def host_facts(self) -> HostFacts:
        return HostFacts(
            hostname=HOST,
            arch="x86_64",
            domain_types=frozenset({"qemu"}),
            pools=frozenset({POOL, "fast"}),
            networks=frozenset(),
        )

    def create_overlay(self, spec: OverlaySpec) -> VolumeInfo:
        self.calls.append(f"overlay {spec.name}")
        self.add(spec.name, 0, backing=spec.backing_path)
        return self.volumes[spec.name]

    def delete_volume(self, pool: str, name: str) -> None:
        if name not in self.volumes:
            raise NotFoundError(name)
        self.calls.append(f"delete {name}")
        del self.volumes[name]

    def pool_available(self, pool: str) -> int | None:
        return self.available

    # SnapshotCopies
    def copy_volume(self, *, pool: str, source: str, target: str) -> VolumeInfo:
        if self.fail_copy and self.volumes.get(target) is None and source == DATA:
            raise PermanentError("stream broke")
        if self.start_during_copy:
            self.state = DomainState.RUNNING
        self.calls.append(f"copy {source}")
        src = self.volumes[source]
        self.add(target, src.allocation_bytes, backing=src.backing_path)
        return self.volumes[target]

    def divert_writes(
        self, uuid: str, overlays: Sequence[PendingOverlay], *, quiesce: bool
    ) -> None:
        if quiesce and not self.agent:
            raise GuestAgentUnavailableError("QEMU guest agent is not configured")
        self.calls.append(f"divert quiesce={quiesce}")
        for o in overlays:
            self.diverted[o.target] = o.path

    def merge_writes(self, uuid: str, target: str, *, timeout: float) -> None:
        self.calls.append(f"merge {target}")
        self.diverted.pop(target, None)

    def thaw(self, uuid: str) -> None:
        self.calls.append("thaw")


@dataclass
class FakeStore:
    snapshot: Obj | None = None
    vm: Obj | None = None
    machine: Obj | None = None
    events: list[tuple[str, str]] = field(default_factory=list)
    conflict_on_conditional: bool = False
    conditional_writes: int = 0

    def get_snapshot(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.snapshot)

    def get_virtual_machine(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.vm) if self.vm and name == self.vm["metadata"]["name"] else None

    def get_machine(self, namespace: str, name: str) -> Obj | None:
        if self.machine and name == self.machine["metadata"]["name"]:
            return copy.deepcopy(self.machine)
        return None

    def patch_snapshot_status(self, obj: Obj, status: Obj, *, conditional: bool) -> Obj:
        assert self.snapshot is not None
        if conditional:
            self.conditional_writes += 1
            if self.conflict_on_conditional:
                raise StateConflictError("changed")
        self.snapshot["status"] = {**(self.snapshot.get("status") or {}), **status}
        return copy.deepcopy(self.snapshot)

    def set_snapshot_finalizers(self, obj: Obj, finalizers: list[str]) -> Obj:
        assert self.snapshot is not None
        self.snapshot["metadata"]["finalizers"] = finalizers
        return copy.deepcopy(self.snapshot)

    def event(self, obj: Any, *, reason: str, message: str, warning: bool = False) -> None:
        self.events.append((reason, message))


def _world(**spec: Any) -> tuple[FakeStore, FakeHost, SnapshotReconciler]:
    store = FakeStore(
        snapshot={
            "metadata": {"name": "snap", "namespace": NS, "uid": SNAP_UID, "generation": 1},
            "spec": {"virtualMachineName": "web", **spec},
        },
        vm={
            "metadata": {"name": "web", "namespace": NS, "uid": "vm-uid"},
            "spec": {
                "infrastructureRef": {
                    "apiGroup": c.GROUP,
                    "kind": c.MACHINE_KIND,
                    "name": "web",
                },
                "powerState": "PoweredOn",
            },
        },
        machine={
            "metadata": {
                "name": "web",
                "namespace": NS,
                "uid": MACHINE_UID,
                "annotations": {"vm-api.io/virtual-machine": "web"},
            },
            "spec": {"host": HOST},
        },
    )
    host = FakeHost()
    reconciler = SnapshotReconciler(
        store=store, hypervisor=host, host=HOST, now=lambda: "2026-12-03T12:00:00Z"
    )
    return store, host, reconciler


def _status(store: FakeStore) -> Obj:
    assert store.snapshot is not None
    return dict(store.snapshot.get("status") or {})


def _reason(store: FakeStore) -> str:
    return str(_status(store)["conditions"][0]["reason"])


def _ours(host: FakeHost) -> list[str]:
    return sorted(v for v in host.volumes if v.startswith(snapshot_prefix(SNAP_UID)))


def test_a_running_machine_is_copied_while_its_writes_are_diverted_and_merged_back() -> None:
    store, host, reconciler = _world()
    outcome = reconciler.reconcile(KEY)
    assert not outcome.retry
    status = _status(store)
    assert status["readyToUse"] is True
    assert status["consistency"] == "Crash"  # Auto, and the agent did not answer
    assert status["host"] == HOST
    assert status["pools"] == [POOL]
    assert status["source"]["machineUid"] == MACHINE_UID
    assert status["source"]["powerState"] == "Running"
    assert status["source"]["spec"]["powerState"] == "PoweredOn"
    assert [d["name"] for d in status["disks"]] == ["bootDisk", "logs"]
    assert status["sizeBytes"] == 400
    assert _reason(store) == c.SNAPSHOT_REASON_READY
    assert c.SNAPSHOT_FINALIZER in store.snapshot["metadata"]["finalizers"]  # type: ignore[index]
    # Diverted once, copied, merged back on both disks, the pending overlays deleted.
    steps = [s for s in host.calls if not s.startswith("overlay")]
    assert steps[0] == "divert quiesce=False"
    assert steps[1:3] == [f"copy {BOOT}", f"copy {DATA}"]
    assert steps[3:5] == ["merge vda", "merge vdb"]
    assert not host.diverted
    assert len(_ours(host)) == 2
    assert not [v for v in host.volumes if v.endswith(".pending.qcow2")]
    assert [r for r, _ in store.events] == [c.SNAPSHOT_REASON_TAKING, c.EVENT_SNAPSHOT_TAKEN]
    # Ready is final: another pass does nothing.
    host.calls.clear()
    reconciler.reconcile(KEY)
    assert host.calls == []


def test_filesystem_consistency_comes_from_the_agent_and_waits_without_one() -> None:
    store, host, reconciler = _world(consistency="Filesystem", disks=["bootDisk"])
    host.agent = True
    reconciler.reconcile(KEY)
    assert _status(store)["consistency"] == "Filesystem"
    assert "divert quiesce=True" in host.calls

    store, host, reconciler = _world(consistency="Filesystem")
    outcome = reconciler.reconcile(KEY)
    assert outcome.retry
    assert _reason(store) == c.SNAPSHOT_REASON_AGENT_UNAVAILABLE
    assert not _status(store).get("readyToUse")
    assert not any(s.startswith(("copy", "merge")) for s in host.calls)
    assert _ours(host) == []


def test_a_copy_that_fails_merges_the_writes_back_and_leaves_no_volume() -> None:
    store, host, reconciler = _world()
    host.fail_copy = True
    outcome = reconciler.reconcile(KEY)
    assert not outcome.retry  # a permanent error is reported, not hammered
    assert _reason(store) == c.SNAPSHOT_REASON_FAILED
    assert "stream broke" in _status(store)["conditions"][0]["message"]
    assert not host.diverted
    assert "merge vda" in host.calls
    assert "merge vdb" in host.calls
    assert _ours(host) == []


def test_a_stopped_machine_is_copied_as_it_is_and_again_if_it_started_meanwhile() -> None:
    store, host, reconciler = _world()
    host.state = DomainState.SHUTOFF
    host.start_during_copy = True
    outcome = reconciler.reconcile(KEY)
    assert outcome.requeue_after is not None
    assert _ours(host) == []
    assert not _status(store).get("readyToUse")

    host.state = DomainState.SHUTOFF
    host.start_during_copy = False
    reconciler.reconcile(KEY)
    status = _status(store)
    assert status["readyToUse"] is True
    assert status["source"]["powerState"] == "Stopped"
    assert not any(s.startswith(("divert", "merge")) for s in host.calls)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda s: setattr(s, "vm", None), c.SNAPSHOT_REASON_SOURCE_NOT_FOUND),
        (lambda s: setattr(s, "machine", None), c.SNAPSHOT_REASON_SOURCE_NOT_LINKED),
        (
            lambda s: s.machine["metadata"].pop("annotations"),
            c.SNAPSHOT_REASON_SOURCE_NOT_LINKED,
        ),
        (lambda s: s.machine["spec"].pop("host"), c.SNAPSHOT_REASON_SOURCE_NOT_BUILT),
    ],
)
def test_a_source_that_cannot_be_copied_is_reported_by_whichever_daemon_writes_first(
    change: Any, reason: str
) -> None:
    store, host, reconciler = _world()
    change(store)
    outcome = reconciler.reconcile(KEY)
    assert outcome.retry
    assert _reason(store) == reason
    assert store.conditional_writes == 1
    assert store.events[-1][0] == reason
    assert store.snapshot["metadata"].get("finalizers") is None  # type: ignore[index]
    assert host.calls == []
    # Said once: the same report is neither written nor announced again.
    reconciler.reconcile(KEY)
    assert store.conditional_writes == 1
    assert len(store.events) == 1

    store, host, reconciler = _world()
    change(store)
    store.conflict_on_conditional = True
    assert reconciler.reconcile(KEY).immediately
    assert store.events == []


def test_a_machine_without_a_domain_or_of_another_host_is_left_alone_or_waited_for() -> None:
    store, host, reconciler = _world()
    store.machine["spec"]["host"] = "h2"  # type: ignore[index]
    reconciler.reconcile(KEY)
    assert "status" not in store.snapshot  # type: ignore[operator]

    store, host, reconciler = _world()
    host.domain = False
    reconciler.reconcile(KEY)
    assert _reason(store) == c.SNAPSHOT_REASON_SOURCE_NOT_BUILT


def test_an_unknown_disk_or_a_full_pool_is_reported_and_nothing_is_made() -> None:
    store, host, reconciler = _world(disks=["bootDisk", "cache"])
    outcome = reconciler.reconcile(KEY)
    assert not outcome.retry
    assert _reason(store) == c.SNAPSHOT_REASON_UNKNOWN_DISK
    assert host.calls == []

    store, host, reconciler = _world()
    host.available = 1000
    assert reconciler.reconcile(KEY).retry
    assert _reason(store) == c.SNAPSHOT_REASON_POOL_FULL
    assert host.calls == []
    assert store.snapshot["metadata"].get("finalizers") is None  # type: ignore[index]


def test_an_interrupted_attempt_is_merged_back_cleaned_up_and_taken_again() -> None:
    store, host, reconciler = _world()
    # What a daemon killed after the diversion and part of the copy leaves behind.
    store.snapshot["metadata"]["finalizers"] = [c.SNAPSHOT_FINALIZER]  # type: ignore[index]
    store.snapshot["status"] = {"host": HOST, "pools": [POOL]}  # type: ignore[index]
    pending = pending_overlay_name(SNAP_UID, "bootDisk")
    host.add(pending, 5, backing=f"/pool/{BOOT}")
    host.diverted["vda"] = f"/pool/{pending}"
    half = f"{snapshot_prefix(SNAP_UID)}half.qcow2"
    host.add(half, 7)
    reconciler.reconcile(KEY)
    assert host.calls[:2] == ["merge vda", "thaw"]
    assert f"delete {half}" in host.calls
    assert f"delete {pending}" in host.calls
    assert _status(store)["readyToUse"] is True
    assert c.EVENT_SNAPSHOT_RECOVERED in [r for r, _ in store.events]
    assert len(_ours(host)) == 2


def test_deletion_removes_exactly_the_snapshot_s_volumes_then_the_finalizer() -> None:
    store, host, reconciler = _world()
    reconciler.reconcile(KEY)
    host.add("snap-another-uid-boot.qcow2", 9)
    store.snapshot["metadata"]["deletionTimestamp"] = "2026-12-03T12:01:00Z"  # type: ignore[index]
    # The VM is gone by now: deletion needs neither it nor its machine.
    store.vm = store.machine = None
    host.state = DomainState.SHUTOFF
    reconciler.reconcile(KEY)
    assert _ours(host) == []
    assert BOOT in host.volumes
    assert DATA in host.volumes
    assert "snap-another-uid-boot.qcow2" in host.volumes
    assert store.snapshot["metadata"]["finalizers"] == []  # type: ignore[index]
    assert store.events[-1][0] == c.EVENT_SNAPSHOT_VOLUMES_DELETED


def test_deletion_waits_while_clones_build_on_the_copies_and_names_them() -> None:
    store, host, reconciler = _world()
    reconciler.reconcile(KEY)
    boot_copy = next(host.volumes[v] for v in _ours(host) if "bootdisk" in v)
    host.add("team_clone-0123456789abcdef--boot.qcow2", 5, backing=boot_copy.path)
    # A clone's data disk in another pool of the host counts too.
    host.elsewhere.append(
        VolumeInfo("fast", "team_c2--data-x.qcow2", "/fast/x", 1, 1, "qcow2", boot_copy.path)
    )
    store.snapshot["metadata"]["deletionTimestamp"] = "2026-12-03T12:01:00Z"  # type: ignore[index]
    outcome = reconciler.reconcile(KEY)
    assert outcome.requeue_after is not None
    assert len(_ours(host)) == 2
    assert store.snapshot["metadata"]["finalizers"] == [c.SNAPSHOT_FINALIZER]  # type: ignore[index]
    assert _reason(store) == c.SNAPSHOT_REASON_IN_USE
    message = _status(store)["conditions"][0]["message"]
    assert "2 volume(s)" in message
    assert f"{POOL}/team_clone-0123456789abcdef--boot.qcow2" in message
    assert "fast/team_c2--data-x.qcow2" in message
    assert store.events[-1][0] == c.SNAPSHOT_REASON_IN_USE

    # The clones are deleted (their own volumes only): the snapshot goes.
    del host.volumes["team_clone-0123456789abcdef--boot.qcow2"]
    host.elsewhere.clear()
    reconciler.reconcile(KEY)
    assert _ours(host) == []
    assert store.snapshot["metadata"]["finalizers"] == []  # type: ignore[index]


def test_a_snapshot_held_by_another_host_or_never_started_is_deleted_accordingly() -> None:
    store, host, reconciler = _world()
    store.snapshot["metadata"]["finalizers"] = [c.SNAPSHOT_FINALIZER]  # type: ignore[index]
    store.snapshot["metadata"]["deletionTimestamp"] = "now"  # type: ignore[index]
    store.snapshot["status"] = {"host": "h2"}  # type: ignore[index]
    reconciler.reconcile(KEY)
    assert store.snapshot["metadata"]["finalizers"] == [c.SNAPSHOT_FINALIZER]  # type: ignore[index]

    store.snapshot["status"] = {}  # type: ignore[index]
    reconciler.reconcile(KEY)
    assert store.snapshot["metadata"]["finalizers"] == []  # type: ignore[index]
    assert host.calls == []


def test_an_api_server_away_is_retried_with_backoff_not_raised() -> None:
    store, _host, reconciler = _world()

    def away(*_: Any, **__: Any) -> Obj:
        raise RetryableError("the API server is away")

    store.get_snapshot = away  # type: ignore[method-assign]
    assert reconciler.reconcile(KEY).retry

    store, _host, reconciler = _world()
    store.vm = None
    store.patch_snapshot_status = away  # type: ignore[method-assign]
    assert reconciler.reconcile(KEY).retry
    assert store.events == []


def test_a_machine_held_for_a_restore_is_not_copied_until_let_go() -> None:
    store, host, reconciler = _world()
    assert store.machine is not None
    store.machine["status"] = {"restore": {"restore": "undo", "uid": "r1", "since": "t"}}
    outcome = reconciler.reconcile(KEY)
    assert outcome.requeue_after
    assert _reason(store) == c.SNAPSHOT_REASON_TAKING
    assert "LibvirtRestore undo" in _status(store)["conditions"][0]["message"]
    assert host.calls == []
    store.machine["status"] = {}
    reconciler.reconcile(KEY)
    assert _status(store)["readyToUse"] is True
