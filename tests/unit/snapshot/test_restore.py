"""The restore's step machine and checks (pure), and its pass over in-memory fakes: the machine held
and let go through its status, each disk made anew as an overlay on the snapshot's copy under its
own name (the old volume deleted), every step safe to repeat after a crash, bad input refused with
nothing changed, a second restore waiting for the first, and deletion letting the machine go."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from libvirt_provider import constants as c
from libvirt_provider.driver.types import DomainState, DomainStatus, OverlaySpec, VolumeInfo
from libvirt_provider.errors import NotFoundError, StateConflictError
from libvirt_provider.machine.hold import RestoreHold, restore_hold
from libvirt_provider.machine.status import compute_status, failed
from libvirt_provider.snapshot.plan import SourceDisk
from libvirt_provider.snapshot.restore import RestoreReconciler
from libvirt_provider.snapshot.restore_plan import Step, check_snapshot, next_step, plan_swaps
from libvirt_provider.snapshot.restore_store import RestoreKey
from libvirt_provider.snapshot.store import Obj
from libvirt_provider.snapshot_api import SnapshotDisk

HOST = "h1"
NS = "team"
POOL = "pool"
MACHINE_UID = "6b6b6b6b-0000-0000-0000-000000000002"
RESTORE_UID = "7c7c7c7c-0000-0000-0000-000000000003"
BOOT = "team_web-0123456789abcdef--boot.qcow2"
DATA = "team_web-0123456789abcdef--data-logs.qcow2"
COPY_BOOT = "snap-5a5a-bootdisk-1.qcow2"
COPY_DATA = "snap-5a5a-logs-2.qcow2"
KEY = RestoreKey(NS, "back")
NOW = "2026-12-03T12:00:00Z"


def _disk(alias: str, target: str, volume: str) -> str:
    return (
        f"<disk type='volume' device='disk'><driver name='qemu' type='qcow2'/>"
        f"<source pool='{POOL}' volume='{volume}'/><target dev='{target}' bus='virtio'/>"
        f"<alias name='ua-disk-{alias}'/></disk>"
    )


@dataclass
class FakeHost:
    """The machine's domain and one pool holding its volumes and the snapshot's copies."""

    state: DomainState = DomainState.RUNNING
    volumes: dict[str, VolumeInfo] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    fail_overlay: bool = False

    def __post_init__(self) -> None:
        self.add(BOOT, 2 << 30, backing="/pool/base.qcow2")
        self.add(DATA, 1 << 30, backing=None)
        self.add(COPY_BOOT, 1 << 30, backing="/pool/base.qcow2")
        self.add(COPY_DATA, 1 << 30, backing=None)
        self.calls.clear()

    def add(self, name: str, capacity: int, *, backing: str | None) -> None:
        self.volumes[name] = VolumeInfo(
            pool=POOL,
            name=name,
            path=f"/pool/{name}",
            capacity_bytes=capacity,
            allocation_bytes=1,
            format="qcow2",
            backing_path=backing,
        )

    def status(self, uuid: str) -> DomainStatus:
        return DomainStatus(state=self.state, reason=0, has_managed_save=False)

    def domain_xml(self, uuid: str, *, inactive: bool = False) -> str:
        return (
            "<domain><devices>"
            + _disk("boot", "vda", BOOT)
            + _disk("data-logs", "vdb", DATA)
            + "</devices></domain>"
        )

    def find_volume(self, pool: str, name: str) -> VolumeInfo | None:
        return self.volumes.get(name)

    def delete_volume(self, pool: str, name: str) -> None:
        if name not in self.volumes:
            raise NotFoundError(name)
        self.calls.append(f"delete {name}")
        del self.volumes[name]

    def create_overlay(self, spec: OverlaySpec) -> VolumeInfo:
        if self.fail_overlay:
            raise NotFoundError("pool went away")
        self.calls.append(f"overlay {spec.name} on {spec.backing_path} {spec.capacity_bytes}")
        self.add(spec.name, spec.capacity_bytes, backing=spec.backing_path)
        return self.volumes[spec.name]


@dataclass
class FakeStore:
    restore: Obj
    snapshot: Obj | None
    vm: Obj | None
    machine: Obj | None
    events: list[tuple[str, str]] = field(default_factory=list)
    machine_events: list[tuple[str, str]] = field(default_factory=list)
    machine_conflict: bool = False

    def get_restore(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.restore)

    def get_snapshot(self, namespace: str, name: str) -> Obj | None:
        if self.snapshot and self.snapshot["metadata"]["name"] == name:
            return copy.deepcopy(self.snapshot)
        return None

    def get_virtual_machine(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.vm) if self.vm and name == self.vm["metadata"]["name"] else None

    def get_machine(self, namespace: str, name: str) -> Obj | None:
        if self.machine and name == self.machine["metadata"]["name"]:
            return copy.deepcopy(self.machine)
        return None

    def patch_restore_status(self, obj: Obj, status: Obj, *, conditional: bool) -> Obj:
        self.restore["status"] = {**(self.restore.get("status") or {}), **status}
        return copy.deepcopy(self.restore)

    def set_restore_finalizers(self, obj: Obj, finalizers: list[str]) -> Obj:
        self.restore["metadata"]["finalizers"] = finalizers
        return copy.deepcopy(self.restore)

    def patch_machine_status(self, machine: Obj, patch: Obj) -> Obj:
        assert self.machine is not None
        if self.machine_conflict:
            raise StateConflictError("the machine changed")
        status = self.machine.setdefault("status", {})
        for k, v in patch.items():
            if v is None:
                status.pop(k, None)
            else:
                status[k] = v
        return copy.deepcopy(self.machine)

    def event(self, obj: Any, *, reason: str, message: str, warning: bool = False) -> None:
        self.events.append((reason, message))

    def machine_event(self, machine: Obj, *, reason: str, message: str) -> None:
        self.machine_events.append((reason, message))

    # The machine's controller, as far as a restore sees it: it acknowledges a hold once off.
    def acknowledge(self, host: FakeHost) -> None:
        assert self.machine is not None
        hold = (self.machine.get("status") or {}).get("restore")
        if hold:
            host.state = DomainState.SHUTOFF
            hold["held"] = True


def _snapshot(machine_uid: str = MACHINE_UID, *, ready: bool = True) -> Obj:
    return {
        "metadata": {"name": "snap", "namespace": NS, "uid": "5a5a"},
        "spec": {"virtualMachineName": "web"},
        "status": {
            "readyToUse": ready,
            "host": HOST,
            "disks": [
                {
                    "name": "bootDisk",
                    "pool": POOL,
                    "volume": COPY_BOOT,
                    "sizeBytes": 1 << 30,
                    "allocatedBytes": 1,
                },
                {
                    "name": "logs",
                    "pool": POOL,
                    "volume": COPY_DATA,
                    "sizeBytes": 1 << 30,
                    "allocatedBytes": 1,
                },
            ],
            "source": {"virtualMachine": "web", "machineUid": machine_uid},
        },
    }


def _world(**spec: Any) -> tuple[FakeStore, FakeHost, RestoreReconciler]:
    store = FakeStore(
        restore={
            "metadata": {"name": "back", "namespace": NS, "uid": RESTORE_UID, "generation": 1},
            "spec": {"snapshotName": "snap", "virtualMachineName": "web", **spec},
        },
        snapshot=_snapshot(),
        vm={
            "metadata": {"name": "web", "namespace": NS, "uid": "vm-uid"},
            "spec": {
                "infrastructureRef": {"apiGroup": c.GROUP, "kind": c.MACHINE_KIND, "name": "web"},
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
    return store, host, RestoreReconciler(store=store, hypervisor=host, host=HOST, now=lambda: NOW)


def _status(store: FakeStore) -> Obj:
    return dict(store.restore.get("status") or {})


def _reason(store: FakeStore) -> str:
    conditions = _status(store)["conditions"]
    assert [x["type"] for x in conditions] == [c.RESTORE_CONDITION_SUCCEEDED]
    return str(conditions[0]["reason"])


def _run(store: FakeStore, host: FakeHost, reconciler: RestoreReconciler) -> None:
    """Passes until the restore is final, the machine's controller acknowledging in between."""
    for _ in range(10):
        reconciler.reconcile(KEY)
        if _status(store).get("phase") in ("Succeeded", "Failed") and not restore_hold(
            store.machine or {}
        ):
            return
        store.acknowledge(host)
    raise AssertionError(f"not finished: {_status(store)}")


# -- the pure parts ------------------------------------------------------------------------------


def _hold(uid: str = RESTORE_UID, *, held: bool = False) -> RestoreHold:
    return RestoreHold(restore="r", uid=uid, since=NOW, held=held)


@pytest.mark.parametrize(
    ("phase", "hold", "running", "wait", "swapped", "step"),
    [
        (None, None, True, False, False, Step.HOLD),
        (None, None, True, True, False, Step.WAIT_POWER_OFF),
        (None, None, False, True, False, Step.HOLD),
        (None, _hold("other"), False, False, False, Step.WAIT_OTHER),
        ("PoweringOff", _hold(), True, False, False, Step.WAIT_HELD),
        ("PoweringOff", _hold(held=True), True, False, False, Step.WAIT_HELD),
        ("PoweringOff", _hold(held=True), False, False, False, Step.SWAP),
        ("Restoring", _hold(held=True), False, False, False, Step.SWAP),
        ("Restoring", _hold(held=True), False, False, True, Step.FINISH),
        # A hold removed by hand mid-restore is set again, even for a user who waits.
        ("Restoring", None, True, True, False, Step.HOLD),
        ("Succeeded", _hold(held=True), False, False, True, Step.RELEASE),
        ("Succeeded", None, True, False, True, Step.NOTHING),
        ("Failed", _hold("other"), True, False, False, Step.NOTHING),
    ],
)
def test_the_step_machine(  # noqa: PLR0917 (one parameter per column of the table)
    phase: str | None,
    hold: RestoreHold | None,
    running: bool,
    wait: bool,
    swapped: bool,
    step: Step,
) -> None:
    got = next_step(
        phase=phase,
        hold=hold,
        uid=RESTORE_UID,
        running=running,
        wait_for_user=wait,
        all_swapped=swapped,
    )
    assert got is step


def test_a_snapshot_is_checked_before_anything_happens() -> None:
    args: dict[str, Any] = {"name": "snap", "namespace": NS, "machine_uid": MACHINE_UID}
    missing = check_snapshot(None, host=HOST, **args)
    assert missing is not None
    assert missing.reason == c.RESTORE_REASON_SNAPSHOT_NOT_FOUND
    unready = check_snapshot(_snapshot(ready=False), host=HOST, **args)
    assert unready is not None
    assert unready.reason == c.RESTORE_REASON_SNAPSHOT_NOT_READY
    assert unready.retry
    theirs = check_snapshot(_snapshot("someone-else"), host=HOST, **args)
    assert theirs is not None
    assert theirs.reason == c.RESTORE_REASON_SNAPSHOT_OF_ANOTHER_MACHINE
    assert not theirs.retry
    elsewhere = check_snapshot(_snapshot(), host="h2", **args)
    assert elsewhere is not None
    assert not elsewhere.retry
    assert check_snapshot(_snapshot(), host=HOST, **args) is None


def test_swaps_match_disks_by_name_and_only_qcow2_volumes() -> None:
    copies = [
        SnapshotDisk(name="bootDisk", pool=POOL, volume=COPY_BOOT, size_bytes=1, allocated_bytes=1)
    ]
    boot = SourceDisk("bootDisk", "vda", POOL, BOOT, None, "qcow2")
    swaps = plan_swaps(copies, [boot])
    assert isinstance(swaps, list)
    assert [(s.volume, s.copy_volume) for s in swaps] == [(BOOT, COPY_BOOT)]
    gone = plan_swaps(copies, [])
    assert not isinstance(gone, list)
    assert gone.reason == c.RESTORE_REASON_UNSUPPORTED_DISK
    raw = plan_swaps(copies, [SourceDisk("bootDisk", "vda", POOL, "x.raw", None, "raw")])
    assert not isinstance(raw, list)
    assert raw.reason == c.RESTORE_REASON_UNSUPPORTED_DISK
    pending = plan_swaps(
        copies, [SourceDisk("bootDisk", "vda", None, None, "/p/snap-1-x.pending.qcow2", "qcow2")]
    )
    assert not isinstance(pending, list)
    assert pending.retry


def test_the_machines_status_keeps_the_hold_and_says_held() -> None:
    current = {"restore": {"restore": "r", "uid": RESTORE_UID, "since": NOW}}
    kwargs: dict[str, Any] = {
        "current": current,
        "power_state": "PoweredOff",
        "host": HOST,
        "domain_uuid": MACHINE_UID,
        "domain_name": "d",
        "addresses": [],
        "readiness": failed(c.REASON_HELD_FOR_RESTORE, "held"),
        "generation": 1,
        "pending_changes": [],
        "now": NOW,
    }
    assert compute_status(**kwargs)["restore"] == current["restore"]
    assert compute_status(**kwargs, restore_held=True)["restore"]["held"] is True
    assert "restore" not in compute_status(**{**kwargs, "current": {}}, restore_held=True)


# -- the pass --------------------------------------------------------------------------------------


def test_a_running_machine_is_held_its_disks_replaced_and_let_go() -> None:
    store, host, reconciler = _world()
    reconciler.reconcile(KEY)
    # Held, nothing touched yet: the machine's controller powers it off first.
    assert restore_hold(store.machine or {}) == RestoreHold("back", RESTORE_UID, NOW, False)
    assert c.RESTORE_FINALIZER in store.restore["metadata"]["finalizers"]
    assert _status(store)["phase"] == "PoweringOff"
    assert _status(store)["powerStateBefore"] == "Running"
    assert host.calls == []
    reconciler.reconcile(KEY)  # still running: waits
    assert host.calls == []
    _run(store, host, reconciler)
    status = _status(store)
    assert status["phase"] == "Succeeded"
    assert _reason(store) == c.RESTORE_REASON_RESTORED
    assert status["conditions"][0]["status"] == "True"
    assert status["returnPowerState"] == "Running"
    assert [d["name"] for d in status["restoredDisks"]] == ["bootDisk", "logs"]
    # Same names, now overlays on the copies, at least as large as before; the old ones deleted.
    assert host.calls == [
        f"delete {BOOT}",
        f"overlay {BOOT} on /pool/{COPY_BOOT} {2 << 30}",
        f"delete {DATA}",
        f"overlay {DATA} on /pool/{COPY_DATA} {1 << 30}",
    ]
    assert host.volumes[BOOT].backing_path == f"/pool/{COPY_BOOT}"
    assert restore_hold(store.machine or {}) is None
    assert [r for r, _ in store.machine_events] == [c.EVENT_RESTORE_HOLD, c.EVENT_RESTORED]
    # Done is done: a later pass changes nothing, whatever the machine does.
    host.calls.clear()
    host.state = DomainState.RUNNING
    reconciler.reconcile(KEY)
    assert host.calls == []


def test_a_user_who_waits_is_waited_for() -> None:
    store, host, reconciler = _world(whenRunning=c.RESTORE_WHEN_RUNNING_WAIT)
    reconciler.reconcile(KEY)
    assert _status(store)["phase"] == "WaitingForPowerOff"
    assert _reason(store) == c.RESTORE_REASON_WAITING_FOR_POWER_OFF
    assert restore_hold(store.machine or {}) is None
    host.state = DomainState.SHUTOFF
    _run(store, host, reconciler)
    assert _status(store)["phase"] == "Succeeded"
    assert _status(store)["powerStateBefore"] == "Off"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"snapshot": None}, c.RESTORE_REASON_SNAPSHOT_NOT_FOUND),
        ({"snapshot": _snapshot(ready=False)}, c.RESTORE_REASON_SNAPSHOT_NOT_READY),
        ({"snapshot": _snapshot("another")}, c.RESTORE_REASON_SNAPSHOT_OF_ANOTHER_MACHINE),
        ({"vm": None}, c.RESTORE_REASON_MACHINE_NOT_FOUND),
    ],
)
def test_bad_input_changes_nothing(change: dict[str, Any], reason: str) -> None:
    store, host, reconciler = _world()
    for k, v in change.items():
        setattr(store, k, v)
    reconciler.reconcile(KEY)
    assert _reason(store) == reason
    assert reason in [r for r, _ in store.events]
    assert host.calls == []
    assert restore_hold(store.machine or {}) is None
    final = reason == c.RESTORE_REASON_SNAPSHOT_OF_ANOTHER_MACHINE
    assert (_status(store)["phase"] == "Failed") is final


def test_a_second_restore_waits_for_the_first() -> None:
    store, host, reconciler = _world()
    assert store.machine is not None
    store.machine["status"] = {"restore": {"restore": "first", "uid": "other", "since": NOW}}
    outcome = reconciler.reconcile(KEY)
    assert outcome.requeue_after
    assert _reason(store) == c.RESTORE_REASON_ANOTHER_RESTORE
    assert "first" in _status(store)["conditions"][0]["message"]
    assert host.calls == []
    store.machine["status"] = {}
    _run(store, host, reconciler)
    assert _status(store)["phase"] == "Succeeded"


def test_two_restores_racing_for_the_hold_one_looks_again() -> None:
    store, _, reconciler = _world()
    store.machine_conflict = True
    assert reconciler.reconcile(KEY).immediately


@pytest.mark.parametrize("crash", ["restore:after-delete", "restore:after-disk"])
def test_a_daemon_killed_mid_restore_converges(crash: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store, host, reconciler = _world()
    reconciler.reconcile(KEY)
    store.acknowledge(host)

    class Killed(BaseException):
        pass

    def die(name: str) -> None:
        if name == crash:
            raise Killed

    monkeypatch.setattr("libvirt_provider.snapshot.restore.crash_point", die)
    with pytest.raises(Killed):
        reconciler.reconcile(KEY)
    monkeypatch.undo()
    # A new daemon: the same store and host, a new reconciler.
    fresh = RestoreReconciler(store=store, hypervisor=host, host=HOST, now=lambda: NOW)
    _run(store, host, fresh)
    assert _status(store)["phase"] == "Succeeded"
    assert host.volumes[BOOT].backing_path == f"/pool/{COPY_BOOT}"
    assert host.volumes[DATA].backing_path == f"/pool/{COPY_DATA}"
    assert sorted(host.volumes) == sorted([BOOT, DATA, COPY_BOOT, COPY_DATA])
    assert restore_hold(store.machine or {}) is None


def test_killed_after_succeeded_only_lets_the_machine_go(monkeypatch: pytest.MonkeyPatch) -> None:
    store, host, reconciler = _world()
    reconciler.reconcile(KEY)
    store.acknowledge(host)

    class Killed(BaseException):
        pass

    def die(name: str) -> None:
        if name == "restore:after-succeeded":
            raise Killed

    monkeypatch.setattr("libvirt_provider.snapshot.restore.crash_point", die)
    with pytest.raises(Killed):
        reconciler.reconcile(KEY)
    monkeypatch.undo()
    assert restore_hold(store.machine or {}) is not None
    host.calls.clear()
    reconciler.reconcile(KEY)
    assert restore_hold(store.machine or {}) is None
    assert host.calls == []


def test_a_deleted_restore_lets_its_machine_go_even_once_the_vm_is_gone() -> None:
    store, host, reconciler = _world()
    reconciler.reconcile(KEY)
    store.restore["metadata"]["deletionTimestamp"] = NOW
    reconciler.reconcile(KEY)
    assert restore_hold(store.machine or {}) is None
    assert c.RESTORE_FINALIZER not in store.restore["metadata"]["finalizers"]
    # Finished, then its VM deleted, then the restore deleted.
    store, host, reconciler = _world()
    _run(store, host, reconciler)
    store.vm = None
    store.machine = None
    store.restore["metadata"]["deletionTimestamp"] = NOW
    reconciler.reconcile(KEY)
    assert c.RESTORE_FINALIZER not in store.restore["metadata"]["finalizers"]


def test_a_failed_swap_is_retried_with_the_machine_still_held() -> None:
    store, host, reconciler = _world()
    reconciler.reconcile(KEY)
    store.acknowledge(host)
    host.fail_overlay = True
    outcome = reconciler.reconcile(KEY)
    assert outcome.retry
    assert _reason(store) == c.RESTORE_REASON_FAILED
    assert restore_hold(store.machine or {}) is not None
    host.fail_overlay = False
    _run(store, host, reconciler)
    assert _status(store)["phase"] == "Succeeded"
