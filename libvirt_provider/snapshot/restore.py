"""One pass over a LibvirtRestore, level-triggered (the steps in `restore_plan.py`).

The daemon serving the machine's host restores it; every other daemon leaves the restore alone,
except to say that its VirtualMachine cannot be found (a report any of them may write, guarded
by the object's resourceVersion). Problems found before any disk is replaced (a missing or
unready snapshot, one of another machine, a disk that cannot be restored) change nothing: the
hold, if this restore had set it, is released, and the restore says why.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from generic import constants as vmapi
from generic.conditions import find_condition
from generic.formats import utc_now
from generic.workqueue import Outcome
from libvirt_provider import constants as c
from libvirt_provider.driver.base import SnapshotHypervisor
from libvirt_provider.driver.types import DomainState, OverlaySpec
from libvirt_provider.errors import (
    HostUnreachableError,
    NotFoundError,
    PermanentError,
    ProviderError,
    StateConflictError,
)
from libvirt_provider.faults import crash_point
from libvirt_provider.machine.hold import hold_mark, release_mark, restore_hold
from libvirt_provider.machine.inputs import power_intent
from libvirt_provider.machine.linkage import check_link
from libvirt_provider.restore_api import LibvirtRestoreSpec, WhenRunning
from libvirt_provider.snapshot.plan import Problem, domain_disks
from libvirt_provider.snapshot.restore_plan import (
    FINAL_PHASES,
    Step,
    Swap,
    check_snapshot,
    next_step,
    plan_swaps,
    succeeded_condition,
)
from libvirt_provider.snapshot.restore_store import RestoreKey, RestoreStore
from libvirt_provider.snapshot.store import Obj
from libvirt_provider.snapshot_api import SnapshotDisk

__all__ = ["RestoreReconciler"]

log = logging.getLogger(__name__)

# Seconds between looks while the machine powers off, or another restore or the user is awaited.
_WAIT_SECONDS = 2.0
_RUNNING = {DomainState.RUNNING, DomainState.BLOCKED, DomainState.PAUSED, DomainState.PMSUSPENDED}


class RestoreReconciler:
    """Restores the machines of one host to their snapshots."""

    def __init__(
        self,
        *,
        store: RestoreStore,
        hypervisor: SnapshotHypervisor,
        host: str,
        now: Callable[[], str] = utc_now,
    ) -> None:
        self._store = store
        self._hv = hypervisor
        self._host = host
        self._now = now

    def reconcile(self, key: RestoreKey) -> Outcome:
        try:
            obj = self._store.get_restore(key.namespace, key.name)
        except ProviderError as err:
            log.warning("restore %s/%s could not be read: %s", key.namespace, key.name, err)
            return Outcome(retry=True)
        if obj is None:
            return Outcome()
        try:
            return self._pass(obj)
        except StateConflictError as err:
            log.info("restore %s/%s: %s; looking again", key.namespace, key.name, err)
            return Outcome(immediately=True)
        except HostUnreachableError as err:
            return self._report(obj, c.RESTORE_REASON_HOST_UNREACHABLE, str(err), retry=True)
        except ProviderError as err:
            log.warning("restore %s/%s failed: %s", key.namespace, key.name, err)
            permanent = isinstance(err, PermanentError)
            return self._report(
                obj,
                c.RESTORE_REASON_FAILED,
                f"{type(err).__name__}: {err}",
                retry=not permanent,
                final=permanent,
            )

    # -- the pass ----------------------------------------------------------------------------

    def _pass(self, obj: Obj) -> Outcome:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        namespace, uid = str(meta.get("namespace")), str(meta.get("uid"))
        recorded = status.get("host")
        if recorded and recorded != self._host:
            return Outcome()
        deleted = bool(meta.get("deletionTimestamp"))
        if deleted and c.RESTORE_FINALIZER not in (meta.get("finalizers") or []):
            return Outcome()
        try:
            spec = LibvirtRestoreSpec.model_validate(obj.get("spec") or {})
        except ValidationError as err:
            return self._report(obj, c.RESTORE_REASON_FAILED, f"invalid spec: {err}", final=True)
        found = self._machine(namespace, spec.virtual_machine_name)
        if isinstance(found, Problem):
            if deleted:
                self._drop_finalizer(obj)
                return Outcome()
            if status.get("phase") in FINAL_PHASES:
                return Outcome()
            return self._report(obj, found.reason, found.message, retry=True, mine=bool(recorded))
        vm, machine = found
        host = (machine.get("spec") or {}).get("host")
        if host != self._host:
            if deleted and not recorded:
                self._drop_finalizer(obj)
                return Outcome()
            if not host and status.get("phase") not in FINAL_PHASES:
                return self._report(
                    obj,
                    c.RESTORE_REASON_MACHINE_NOT_BUILT,
                    f"VirtualMachine {spec.virtual_machine_name!r} is not placed on a host yet",
                    retry=True,
                    mine=False,
                )
            return Outcome()
        machine_uid = str((machine.get("metadata") or {}).get("uid"))
        hold = restore_hold(machine)
        ours = hold is not None and hold.uid == uid
        if deleted:
            return self._delete(obj, spec, machine, ours=ours)
        try:
            state = self._hv.status(machine_uid).state
        except NotFoundError:
            state = None
        phase = status.get("phase")
        if state is None and phase not in FINAL_PHASES:
            if ours:
                self._store.patch_machine_status(machine, release_mark())
            return self._report(
                obj,
                c.RESTORE_REASON_MACHINE_NOT_BUILT,
                f"VirtualMachine {spec.virtual_machine_name!r} has no domain on host "
                f"{self._host!r}",
                retry=True,
            )
        swaps: list[Swap] = []
        if phase not in FINAL_PHASES:
            planned = self._swaps(obj, spec, namespace, machine_uid)
            swaps = planned if not isinstance(planned, Problem) else []
            if isinstance(planned, Problem):
                if ours and not status.get("restoredDisks"):
                    self._store.patch_machine_status(machine, release_mark())
                    self._store.machine_event(
                        machine,
                        reason=c.EVENT_RESTORE_HOLD,
                        message=f"released by {c.RESTORE_KIND} {meta.get('name')}: "
                        f"{planned.message}",
                    )
                return self._report(
                    obj,
                    planned.reason,
                    planned.message,
                    retry=planned.retry,
                    final=not planned.retry,
                )
        return self._step(obj, spec, vm, machine, swaps, running=state in _RUNNING)

    def _step(
        self,
        obj: Obj,
        spec: LibvirtRestoreSpec,
        vm: Obj,
        machine: Obj,
        swaps: list[Swap],
        *,
        running: bool,
    ) -> Outcome:
        status = obj.get("status") or {}
        hold = restore_hold(machine)
        done = {str(d.get("name")) for d in status.get("restoredDisks") or []}
        step = next_step(
            phase=status.get("phase"),
            hold=hold,
            uid=str((obj.get("metadata") or {}).get("uid")),
            running=running,
            wait_for_user=spec.when_running is WhenRunning.WAIT,
            all_swapped=all(s.name in done for s in swaps),
        )
        if step is Step.NOTHING:
            return Outcome()
        if step is Step.RELEASE:
            self._store.patch_machine_status(machine, release_mark())
            return Outcome()
        if step is Step.WAIT_OTHER:
            assert hold is not None
            return self._waiting(
                obj,
                c.RESTORE_REASON_ANOTHER_RESTORE,
                f"{c.RESTORE_KIND} {hold.restore} holds the machine since {hold.since}; this "
                "restore starts once it is done",
                phase=c.RESTORE_PHASE_PENDING,
            )
        if step is Step.WAIT_POWER_OFF:
            return self._waiting(
                obj,
                c.RESTORE_REASON_WAITING_FOR_POWER_OFF,
                "the machine runs; the restore starts once it is powered off "
                f"(whenRunning: {WhenRunning.WAIT.value})",
                phase=c.RESTORE_PHASE_WAITING,
            )
        if step is Step.HOLD:
            return self._hold(obj, machine, running)
        if step is Step.WAIT_HELD:
            return self._waiting(
                obj,
                c.RESTORE_REASON_IN_PROGRESS,
                "the machine is being powered off by its controller",
                phase=c.RESTORE_PHASE_POWERING_OFF,
            )
        if step is Step.SWAP:
            obj = self._swap_all(obj, machine, swaps)
        return self._finish(obj, machine, vm, spec)

    def _delete(self, obj: Obj, spec: LibvirtRestoreSpec, machine: Obj, *, ours: bool) -> Outcome:
        """Disks half replaced are finished (the snapshot's copies cannot go meanwhile: the
        overlays already made keep it InUse); then the machine is let go."""
        status = obj.get("status") or {}
        if ours and status.get("restoredDisks") and status.get("phase") not in FINAL_PHASES:
            namespace = str((obj.get("metadata") or {}).get("namespace"))
            machine_uid = str((machine.get("metadata") or {}).get("uid"))
            pending = self._swaps(obj, spec, namespace, machine_uid)
            if not isinstance(pending, Problem):
                obj = self._swap_all(obj, machine, pending)
        if ours:
            self._store.patch_machine_status(machine, release_mark())
        self._drop_finalizer(obj)
        return Outcome()

    def _machine(self, namespace: str, vm_name: str) -> tuple[Obj, Obj] | Problem:
        vm = self._store.get_virtual_machine(namespace, vm_name)
        if vm is None:
            return Problem(
                c.RESTORE_REASON_MACHINE_NOT_FOUND,
                f"VirtualMachine {vm_name!r} does not exist in namespace {namespace!r}",
            )
        ref = (vm.get("spec") or {}).get("infrastructureRef") or {}
        machine = (
            self._store.get_machine(namespace, str(ref.get("name")))
            if ref.get("apiGroup") == c.GROUP and ref.get("kind") == c.MACHINE_KIND
            else None
        )
        if machine is None:
            return Problem(
                c.RESTORE_REASON_MACHINE_NOT_FOUND,
                f"VirtualMachine {vm_name!r} is not linked to a {c.MACHINE_KIND}",
            )
        link = check_link(machine, vm)
        if not link.linked or link.vm_name != vm_name:
            return Problem(
                c.RESTORE_REASON_MACHINE_NOT_FOUND,
                f"VirtualMachine {vm_name!r} and its {c.MACHINE_KIND} are not linked: "
                f"{link.message}",
            )
        return vm, machine

    def _swaps(
        self, obj: Obj, spec: LibvirtRestoreSpec, namespace: str, machine_uid: str
    ) -> list[Swap] | Problem:
        snapshot = self._store.get_snapshot(namespace, spec.snapshot_name)
        problem = check_snapshot(
            snapshot,
            name=spec.snapshot_name,
            namespace=namespace,
            machine_uid=machine_uid,
            host=self._host,
        )
        if problem is not None:
            return problem
        assert snapshot is not None
        raw = (snapshot.get("status") or {}).get("disks") or []
        try:
            copies = [SnapshotDisk.model_validate(d) for d in raw]
        except ValidationError as err:
            return Problem(
                c.RESTORE_REASON_FAILED, f"snapshot {spec.snapshot_name!r}: {err}", retry=False
            )
        return plan_swaps(copies, domain_disks(self._hv.domain_xml(machine_uid, inactive=True)))

    # -- the steps ---------------------------------------------------------------------------

    def _hold(self, obj: Obj, machine: Obj, running: bool) -> Outcome:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        obj = self._with_finalizer(obj)
        now = self._now()
        fields: dict[str, Any] = {
            "host": self._host,
            "machineUid": (machine.get("metadata") or {}).get("uid"),
            "startTime": status.get("startTime") or now,
        }
        if not status.get("powerStateBefore"):
            # Recorded before the hold: once held the machine is off whatever it was.
            fields["powerStateBefore"] = "Running" if running else "Off"
        obj = self._write(
            obj,
            fields,
            reason=c.RESTORE_REASON_IN_PROGRESS,
            message="holding the machine off",
            phase=c.RESTORE_PHASE_POWERING_OFF,
        )
        self._store.patch_machine_status(
            machine, hold_mark(str(meta.get("name")), str(meta.get("uid")), now)
        )
        self._store.machine_event(
            machine,
            reason=c.EVENT_RESTORE_HOLD,
            message=f"held off by {c.RESTORE_KIND} {meta.get('name')} to restore snapshot "
            f"{(obj.get('spec') or {}).get('snapshotName')}"
            + (" (powered off for it)" if running else ""),
        )
        return Outcome(requeue_after=_WAIT_SECONDS)

    def _swap_all(self, obj: Obj, machine: Obj, swaps: list[Swap]) -> Obj:
        status = obj.get("status") or {}
        restored = list(status.get("restoredDisks") or [])
        done = {str(d.get("name")) for d in restored}
        if status.get("phase") != c.RESTORE_PHASE_RESTORING:
            obj = self._write(
                obj,
                {},
                reason=c.RESTORE_REASON_IN_PROGRESS,
                message="restoring: the machine is off; replacing its disks",
                phase=c.RESTORE_PHASE_RESTORING,
            )
        for swap in swaps:
            if swap.name in done:
                continue
            copy = self._hv.find_volume(swap.copy_pool, swap.copy_volume)
            if copy is None:
                raise PermanentError(
                    f"the snapshot's copy {swap.copy_pool}/{swap.copy_volume} of disk "
                    f"{swap.name!r} is gone"
                )
            old = self._hv.find_volume(swap.pool, swap.volume)
            capacity = max(
                old.capacity_bytes if old is not None else 0, swap.size_bytes, copy.capacity_bytes
            )
            if old is not None:
                with contextlib.suppress(NotFoundError):
                    self._hv.delete_volume(swap.pool, swap.volume)
            crash_point("restore:after-delete")
            self._hv.create_overlay(
                OverlaySpec(
                    pool=swap.pool,
                    name=swap.volume,
                    backing_path=copy.path,
                    backing_format=copy.format or "qcow2",
                    capacity_bytes=capacity,
                )
            )
            restored.append(
                {
                    "name": swap.name,
                    "pool": swap.pool,
                    "volume": swap.volume,
                    "backingVolume": copy.path,
                }
            )
            obj = self._write(
                obj,
                {"restoredDisks": restored},
                reason=c.RESTORE_REASON_IN_PROGRESS,
                message=f"restoring: disk {swap.name} restored",
                phase=c.RESTORE_PHASE_RESTORING,
            )
            crash_point("restore:after-disk")
        return obj

    def _finish(self, obj: Obj, machine: Obj, vm: Obj, spec: LibvirtRestoreSpec) -> Outcome:
        status = obj.get("status") or {}
        disks = [str(d.get("name")) for d in status.get("restoredDisks") or []]
        back = "Running" if power_intent(vm).desired == vmapi.POWERED_ON else "Off"
        message = (
            f"disks {', '.join(disks)} restored from snapshot {spec.snapshot_name}; the machine "
            f"returns to {back} (it was {status.get('powerStateBefore')})"
        )
        obj = self._write(
            obj,
            {"completionTime": self._now(), "returnPowerState": back},
            reason=c.RESTORE_REASON_RESTORED,
            message=message,
            phase=c.RESTORE_PHASE_SUCCEEDED,
            condition="True",
        )
        crash_point("restore:after-succeeded")
        self._store.patch_machine_status(machine, release_mark())
        self._store.machine_event(
            machine,
            reason=c.EVENT_RESTORED,
            message=f"{c.RESTORE_KIND} {(obj.get('metadata') or {}).get('name')}: {message}",
        )
        return Outcome()

    # -- helpers -----------------------------------------------------------------------------

    def _with_finalizer(self, obj: Obj) -> Obj:
        finalizers = (obj.get("metadata") or {}).get("finalizers") or []
        if c.RESTORE_FINALIZER in finalizers:
            return obj
        return self._store.set_restore_finalizers(obj, [*finalizers, c.RESTORE_FINALIZER])

    def _drop_finalizer(self, obj: Obj) -> None:
        finalizers = (obj.get("metadata") or {}).get("finalizers") or []
        if c.RESTORE_FINALIZER in finalizers:
            self._store.set_restore_finalizers(
                obj, [f for f in finalizers if f != c.RESTORE_FINALIZER]
            )

    def _waiting(self, obj: Obj, reason: str, message: str, *, phase: str) -> Outcome:
        self._write(obj, {}, reason=reason, message=message, phase=phase)
        return Outcome(requeue_after=_WAIT_SECONDS)

    def _report(
        self,
        obj: Obj,
        reason: str,
        message: str,
        *,
        retry: bool = False,
        final: bool = False,
        mine: bool = True,
    ) -> Outcome:
        """Succeeded=False with `reason` (Failed and finished when `final`); written and
        announced only when it changes. A report by a daemon that may not hold the restore is
        written only if the object did not change since it was read."""
        phase = (obj.get("status") or {}).get("phase")
        if phase in FINAL_PHASES:
            return Outcome()
        fields: dict[str, Any] = {"completionTime": self._now()} if final else {}
        try:
            self._write(
                obj,
                fields,
                reason=reason,
                message=message,
                phase=c.RESTORE_PHASE_FAILED if final else (phase or c.RESTORE_PHASE_PENDING),
                conditional=not mine,
                warning=True,
            )
        except StateConflictError:
            return Outcome(immediately=True)
        except ProviderError as err:
            log.warning("restore: reporting %s failed: %s", reason, err)
            return Outcome(retry=True)
        return Outcome(retry=retry and not final)

    def _write(
        self,
        obj: Obj,
        fields: Mapping[str, Any],
        *,
        reason: str,
        message: str,
        phase: str,
        condition: str = "False",
        conditional: bool = False,
        warning: bool = False,
    ) -> Obj:
        meta = obj.get("metadata") or {}
        current = obj.get("status") or {}
        before = find_condition(current.get("conditions"), c.RESTORE_CONDITION_SUCCEEDED) or {}
        if (
            before.get("status") == condition
            and before.get("reason") == reason
            and before.get("message") == message
            and current.get("phase") == phase
            and all(k == "completionTime" or current.get(k) == v for k, v in fields.items())
        ):
            return obj
        generation = meta.get("generation")
        body: dict[str, Any] = {
            **fields,
            "phase": phase,
            "conditions": succeeded_condition(
                current.get("conditions"),
                status=condition,
                reason=reason,
                message=message,
                generation=generation if isinstance(generation, int) else None,
                now=self._now(),
            ),
        }
        if isinstance(generation, int):
            body["observedGeneration"] = generation
        written = self._store.patch_restore_status(obj, body, conditional=conditional)
        if before.get("reason") != reason or (
            reason != c.RESTORE_REASON_IN_PROGRESS and before.get("message") != message
        ):
            self._store.event(written, reason=reason, message=message, warning=warning)
        return written
