"""One pass over a LibvirtSnapshot, level-triggered: read everything, take the next steps.

The daemon serving the source machine's host takes the snapshot; every other daemon leaves it
alone, except to say that its source cannot be found (a report any of them may write, guarded by
the object's resourceVersion so one writes it and posts its Event). A pass:

1. A deleted snapshot: while volumes of the host (clones' disks) are overlays on its copies, it
   waits (`InUse`, naming them; the finalizer stays). Then merge back any writes still diverted
   for it, delete every volume whose name carries its uid in the pools it recorded, drop the
   finalizer.
2. Ready already: nothing to do (a snapshot never changes once taken).
3. The source: the VirtualMachine, its linked LibvirtMachine, its host, its domain; a problem is
   reported with its reason and the pass ends.
4. Recovery of an attempt that did not finish (the daemon stopped in the middle): writes still
   diverted to this snapshot's pending overlays are merged back (and the guest thawed, in case),
   and whatever volumes it made are deleted. A snapshot is taken again from the start, never
   reported ready from pieces.
5. Which disks, whether they fit the pools, then the finalizer and an in-progress status naming
   the host and pools (so a deletion finds everything from here on), then the copy (`take`).
6. Ready, with each disk's volume and size, the consistency achieved and the machine's spec.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from generic.conditions import find_condition
from generic.formats import utc_now
from generic.workqueue import Outcome
from libvirt_provider import constants as c
from libvirt_provider.driver.base import SnapshotHypervisor
from libvirt_provider.driver.types import DomainState, OverlaySpec, PendingOverlay, VolumeInfo
from libvirt_provider.errors import (
    GuestAgentUnavailableError,
    HostUnreachableError,
    NotFoundError,
    PermanentError,
    ProviderError,
    StateConflictError,
)
from libvirt_provider.faults import crash_point
from libvirt_provider.machine.hold import restore_hold
from libvirt_provider.machine.linkage import check_link
from libvirt_provider.snapshot.names import copy_volume_name, owned_by, pending_overlay_name
from libvirt_provider.snapshot.plan import (
    Problem,
    SourceDisk,
    achieved_consistency,
    dependents,
    domain_disks,
    missing_space,
    ready_condition,
    select_disks,
)
from libvirt_provider.snapshot.store import Obj, SnapshotKey, SnapshotStore
from libvirt_provider.snapshot_api import Consistency, LibvirtSnapshotSpec

__all__ = ["SnapshotReconciler"]

log = logging.getLogger(__name__)

_RUNNING = {DomainState.RUNNING, DomainState.BLOCKED, DomainState.PAUSED, DomainState.PMSUSPENDED}
# Seconds between looks while something else must finish first (another snapshot of the same
# machine, a machine in transition).
_WAIT_SECONDS = 2.0
# Seconds between looks while a deletion waits for the volumes built on the snapshot to go (their
# machines' deletions do not wake the snapshot), and how many of them a message names.
_DEPENDENTS_SECONDS = 10.0
_DEPENDENTS_SHOWN = 10


@dataclass(frozen=True)
class _Source:
    vm: Obj
    machine: Obj
    uuid: str
    running: bool
    disks: list[SourceDisk]


@dataclass(frozen=True)
class _Taken:
    copies: list[tuple[SourceDisk, VolumeInfo]]
    consistency: Consistency
    at: str
    diverted_seconds: float | None
    merged_seconds: float | None


class SnapshotReconciler:
    """Takes and deletes the snapshots of the machines of one host."""

    def __init__(
        self,
        *,
        store: SnapshotStore,
        hypervisor: SnapshotHypervisor,
        host: str,
        now: Callable[[], str] = utc_now,
        commit_timeout: float = c.SNAPSHOT_COMMIT_TIMEOUT_SECONDS,
    ) -> None:
        self._store = store
        self._hv = hypervisor
        self._host = host
        self._now = now
        self._commit_timeout = commit_timeout
        self._busy: set[str] = set()
        self._busy_lock = threading.Lock()

    # -- the pass ----------------------------------------------------------------------------

    def reconcile(self, key: SnapshotKey) -> Outcome:
        try:
            snap = self._store.get_snapshot(key.namespace, key.name)
        except ProviderError as err:
            log.warning("snapshot %s/%s could not be read: %s", key.namespace, key.name, err)
            return Outcome(retry=True)
        if snap is None:
            return Outcome()
        try:
            return self._pass(snap)
        except StateConflictError as err:
            log.info("snapshot %s/%s: %s; looking again", key.namespace, key.name, err)
            return Outcome(immediately=True)
        except HostUnreachableError as err:
            return self._report(
                snap, c.SNAPSHOT_REASON_HOST_UNREACHABLE, str(err), retry=True, mine=True
            )
        except ProviderError as err:
            log.warning("snapshot %s/%s failed: %s", key.namespace, key.name, err)
            return self._report(
                snap,
                c.SNAPSHOT_REASON_FAILED,
                f"{type(err).__name__}: {err}",
                retry=not isinstance(err, PermanentError),
                mine=True,
            )

    def _pass(self, snap: Obj) -> Outcome:
        meta = snap.get("metadata") or {}
        status = snap.get("status") or {}
        recorded = status.get("host")
        if recorded and recorded != self._host:
            return Outcome()
        if meta.get("deletionTimestamp"):
            if c.SNAPSHOT_FINALIZER not in (meta.get("finalizers") or []):
                return Outcome()
            if not recorded:
                # The finalizer is added before the host is recorded and nothing is made before
                # both: no volume exists. Any daemon may let the object go.
                self._drop_finalizer(snap)
                return Outcome()
            return self._delete(snap)
        if status.get("readyToUse"):
            return Outcome()
        try:
            spec = LibvirtSnapshotSpec.model_validate(snap.get("spec") or {})
        except ValidationError as err:
            return self._report(
                snap, c.SNAPSHOT_REASON_FAILED, f"invalid spec: {err}", retry=False, mine=False
            )
        source = self._source(snap, spec)
        if isinstance(source, Outcome):
            return source
        if isinstance(source, Problem):
            if recorded:
                # An attempt had started here; its pieces are no use now.
                self._discard(snap)
            return self._report(
                snap, source.reason, source.message, retry=source.retry, mine=bool(recorded)
            )
        with self._machine(source.uuid) as free:
            if not free:
                return self._waiting(snap, "another snapshot of this machine is being taken")
            return self._take_pass(snap, spec, source)

    def _source(self, snap: Obj, spec: LibvirtSnapshotSpec) -> _Source | Problem | Outcome:
        namespace = str((snap.get("metadata") or {}).get("namespace"))
        vm_name = spec.virtual_machine_name
        vm = self._store.get_virtual_machine(namespace, vm_name)
        if vm is None:
            return Problem(
                c.SNAPSHOT_REASON_SOURCE_NOT_FOUND,
                f"VirtualMachine {vm_name!r} does not exist in namespace {namespace!r}",
            )
        ref = (vm.get("spec") or {}).get("infrastructureRef") or {}
        if ref.get("apiGroup") != c.GROUP or ref.get("kind") != c.MACHINE_KIND:
            return Problem(
                c.SNAPSHOT_REASON_SOURCE_NOT_LINKED,
                f"VirtualMachine {vm_name!r} is not linked to a {c.MACHINE_KIND} "
                f"(spec.infrastructureRef names {ref.get('kind')!r} of {ref.get('apiGroup')!r})",
            )
        machine = self._store.get_machine(namespace, str(ref.get("name")))
        if machine is None:
            return Problem(
                c.SNAPSHOT_REASON_SOURCE_NOT_LINKED,
                f"{c.MACHINE_KIND} {ref.get('name')!r} named by VirtualMachine {vm_name!r} does "
                "not exist",
            )
        link = check_link(machine, vm)
        if not link.linked or link.vm_name != vm_name:
            return Problem(
                c.SNAPSHOT_REASON_SOURCE_NOT_LINKED,
                f"VirtualMachine {vm_name!r} and {c.MACHINE_KIND} {ref.get('name')!r} are not "
                f"linked: {link.message}",
            )
        host = (machine.get("spec") or {}).get("host")
        hold = restore_hold(machine)
        if hold is not None and host == self._host:
            # Its disks are being replaced: a copy now could catch one half made.
            return self._waiting(
                snap, f"{c.RESTORE_KIND} {hold.restore} is restoring the machine's disks"
            )
        if not host:
            return Problem(
                c.SNAPSHOT_REASON_SOURCE_NOT_BUILT,
                f"VirtualMachine {vm_name!r} is not placed on a host yet",
            )
        if host != self._host:
            return Outcome()
        uuid = str((machine.get("metadata") or {}).get("uid"))
        try:
            state = self._hv.status(uuid).state
            xml = self._hv.domain_xml(uuid)
        except NotFoundError:
            return Problem(
                c.SNAPSHOT_REASON_SOURCE_NOT_BUILT,
                f"VirtualMachine {vm_name!r} has no domain on host {self._host!r} yet",
            )
        if state not in _RUNNING and state is not DomainState.SHUTOFF:
            return self._waiting(snap, f"the machine is in transition ({state.value})")
        return _Source(vm, machine, uuid, state in _RUNNING, domain_disks(xml))

    def _take_pass(self, snap: Obj, spec: LibvirtSnapshotSpec, source: _Source) -> Outcome:
        uid = str((snap.get("metadata") or {}).get("uid"))
        source = self._recover(snap, uid, source)
        others = [d.name for d in source.disks if d.pending]
        if others:
            return self._waiting(snap, f"disks {others} are being copied by another snapshot")
        chosen = select_disks(spec.disks, source.disks)
        if isinstance(chosen, Problem):
            self._discard(snap)
            return self._report(snap, chosen.reason, chosen.message, retry=chosen.retry, mine=True)
        if not source.running:
            early = achieved_consistency(spec.consistency, running=False, agent_answered=False)
            if isinstance(early, Problem):
                return self._report(snap, early.reason, early.message, retry=True, mine=True)
        self._discard(snap)
        volumes = {d.name: self._volume(d) for d in chosen}
        needed: dict[str, int] = {}
        for d in chosen:
            needed[str(d.pool)] = needed.get(str(d.pool), 0) + volumes[d.name].allocation_bytes
        short = missing_space(needed, {p: self._hv.pool_available(p) for p in needed})
        if short is not None:
            return self._report(snap, short.reason, short.message, retry=True, mine=True)

        snap = self._with_finalizer(snap)
        pools = sorted(needed)
        snap = self._write(
            snap,
            {
                "host": self._host,
                "pools": pools,
                "readyToUse": False,
                "source": self._source_record(source),
            },
            reason=c.SNAPSHOT_REASON_TAKING,
            message=f"copying disks {', '.join(d.name for d in chosen)} on host {self._host}",
            status="False",
        )
        started = time.monotonic()
        try:
            taken = (
                self._take_running(uid, spec, source, chosen, volumes)
                if source.running
                else self._take_stopped(uid, source, chosen)
            )
        except GuestAgentUnavailableError as err:
            problem = achieved_consistency(spec.consistency, running=True, agent_answered=False)
            message = problem.message if isinstance(problem, Problem) else str(err)
            return self._report(
                snap,
                c.SNAPSHOT_REASON_AGENT_UNAVAILABLE,
                f"{message} ({err})",
                retry=True,
                mine=True,
            )
        if taken is None:
            return self._waiting(snap, "the machine started while its disks were copied; again")
        size = sum(v.allocation_bytes for _, v in taken.copies)
        disks = [
            {
                "name": d.name,
                "pool": v.pool,
                "volume": v.name,
                "sizeBytes": v.capacity_bytes,
                "allocatedBytes": v.allocation_bytes,
                **({"backingVolume": v.backing_path} if v.backing_path else {}),
            }
            for d, v in taken.copies
        ]
        timing = f"in {time.monotonic() - started:.2f} s"
        if taken.diverted_seconds is not None and taken.merged_seconds is not None:
            timing += (
                f"; the guest ran on, its writes diverted in {taken.diverted_seconds:.3f} s and "
                f"merged back in {taken.merged_seconds:.3f} s"
            )
        message = (
            f"{len(disks)} disk(s), {size} bytes, {taken.consistency.value}-consistent, "
            f"taken on host {self._host} {timing}"
        )
        snap = self._write(
            snap,
            {
                "readyToUse": True,
                "creationTime": taken.at,
                "consistency": taken.consistency.value,
                "disks": disks,
                "sizeBytes": size,
            },
            reason=c.SNAPSHOT_REASON_READY,
            message=message,
            status="True",
            event=False,
        )
        self._store.event(snap, reason=c.EVENT_SNAPSHOT_TAKEN, message=message)
        return Outcome()

    # -- taking ------------------------------------------------------------------------------

    def _take_stopped(
        self, uid: str, source: _Source, chosen: Sequence[SourceDisk]
    ) -> _Taken | None:
        at = self._now()
        copies = self._copy(uid, chosen)
        # The machine's own controller may have started it meanwhile: a copy of a disk that was
        # being written is no snapshot. It is thrown away and taken again.
        if self._hv.status(source.uuid).state is not DomainState.SHUTOFF:
            for _, volume in copies:
                self._delete_volume(volume.pool, volume.name)
            return None
        consistency = achieved_consistency(Consistency.CRASH, running=False, agent_answered=False)
        assert isinstance(consistency, Consistency)
        return _Taken(copies, consistency, at, None, None)

    def _take_running(
        self,
        uid: str,
        spec: LibvirtSnapshotSpec,
        source: _Source,
        chosen: Sequence[SourceDisk],
        volumes: Mapping[str, VolumeInfo],
    ) -> _Taken:
        overlays: list[tuple[SourceDisk, VolumeInfo]] = []
        diverted = False
        merged_seconds: float | None = None
        try:
            for d in chosen:
                vol = volumes[d.name]
                overlays.append(
                    (
                        d,
                        self._hv.create_overlay(
                            OverlaySpec(
                                pool=str(d.pool),
                                name=pending_overlay_name(uid, d.name),
                                backing_path=vol.path,
                                backing_format=d.format,
                                capacity_bytes=vol.capacity_bytes,
                            )
                        ),
                    )
                )
            pending = [PendingOverlay(d.target, ov.path) for d, ov in overlays]
            agent_answered = False
            before = time.monotonic()
            if spec.consistency is not Consistency.CRASH:
                try:
                    self._hv.divert_writes(source.uuid, pending, quiesce=True)
                    agent_answered = True
                except GuestAgentUnavailableError:
                    if spec.consistency is Consistency.FILESYSTEM:
                        raise
                    log.info("snapshot %s: the guest agent did not answer; crash-consistent", uid)
            if not agent_answered:
                before = time.monotonic()
                self._hv.divert_writes(source.uuid, pending, quiesce=False)
            diverted = True
            diverted_seconds = time.monotonic() - before
            crash_point("snapshot:after-divert")
            at = self._now()
            copies = self._copy(uid, chosen)
            crash_point("snapshot:after-copy")
        finally:
            if diverted:
                # On every path: the machine writes its own volumes again before this returns.
                start = time.monotonic()
                for d in chosen:
                    self._hv.merge_writes(source.uuid, d.target, timeout=self._commit_timeout)
                merged_seconds = time.monotonic() - start
            for _, ov in overlays:
                self._delete_volume(ov.pool, ov.name)
        consistency = achieved_consistency(
            spec.consistency, running=True, agent_answered=agent_answered
        )
        assert isinstance(consistency, Consistency)
        return _Taken(copies, consistency, at, diverted_seconds, merged_seconds)

    def _copy(self, uid: str, chosen: Sequence[SourceDisk]) -> list[tuple[SourceDisk, VolumeInfo]]:
        copies: list[tuple[SourceDisk, VolumeInfo]] = []
        try:
            for d in chosen:
                target = copy_volume_name(uid, d.name, extension=_extension(d.format))
                copies.append(
                    (d, self._hv.copy_volume(pool=str(d.pool), source=str(d.volume), target=target))
                )
        except BaseException:
            for _, volume in copies:
                self._delete_volume(volume.pool, volume.name)
            raise
        return copies

    # -- recovery and deletion ---------------------------------------------------------------

    def _recover(self, snap: Obj, uid: str, source: _Source) -> _Source:
        """Merge back writes an earlier attempt of this snapshot left diverted."""
        ours = [d for d in source.disks if d.pending_for(uid)]
        if not ours:
            return source
        if not source.running:
            raise PermanentError(
                f"the machine stopped while disks {[d.name for d in ours]} wrote into this "
                "snapshot's pending overlays; they hold its latest writes and are kept "
                "(docs/snapshots.md, 'Recovery')"
            )
        for d in ours:
            self._hv.merge_writes(source.uuid, d.target, timeout=self._commit_timeout)
        with contextlib.suppress(ProviderError):
            # A freeze is libvirtd's own and always thawed by it; this is for a guest that was
            # left frozen all the same (libvirtd itself killed between freeze and thaw).
            self._hv.thaw(source.uuid)
        self._store.event(
            snap,
            reason=c.EVENT_SNAPSHOT_RECOVERED,
            message=f"an interrupted attempt's writes to disks {[d.name for d in ours]} were "
            "merged back into the machine's volumes; taking the snapshot again",
        )
        return _Source(
            source.vm,
            source.machine,
            source.uuid,
            source.running,
            domain_disks(self._hv.domain_xml(source.uuid)),
        )

    def _discard(self, snap: Obj) -> None:
        """Delete every volume of this snapshot (an unfinished attempt's) in its pools."""
        meta = snap.get("metadata") or {}
        uid = str(meta.get("uid"))
        status = snap.get("status") or {}
        for pool in status.get("pools") or []:
            for name in self._hv.volume_names(str(pool)):
                if owned_by(name, uid):
                    self._delete_volume(str(pool), name)

    def _delete(self, snap: Obj) -> Outcome:
        meta = snap.get("metadata") or {}
        uid = str(meta.get("uid"))
        using = self._dependents(snap, uid)
        if using:
            shown = ", ".join(using[:_DEPENDENTS_SHOWN])
            more = (
                f" and {len(using) - _DEPENDENTS_SHOWN} more"
                if len(using) > _DEPENDENTS_SHOWN
                else ""
            )
            self._report(
                snap,
                c.SNAPSHOT_REASON_IN_USE,
                f"deletion waits: {len(using)} volume(s) on host {self._host} are overlays on "
                f"this snapshot's copies (the machines cloned from it or restored to it go first): "
                f"{shown}{more}",
                retry=False,
                mine=True,
            )
            return Outcome(requeue_after=_DEPENDENTS_SECONDS)
        machine_uid = ((snap.get("status") or {}).get("source") or {}).get("machineUid")
        if machine_uid:
            with self._machine(str(machine_uid)) as free:
                if not free:
                    return Outcome(requeue_after=_WAIT_SECONDS)
                try:
                    running = self._hv.status(str(machine_uid)).state in _RUNNING
                    disks = domain_disks(self._hv.domain_xml(str(machine_uid)))
                except NotFoundError:
                    disks, running = [], False
                ours = [d for d in disks if d.pending_for(uid)]
                if ours and not running:
                    return self._report(
                        snap,
                        c.SNAPSHOT_REASON_FAILED,
                        f"disks {[d.name for d in ours]} of the stopped machine still write into "
                        "this snapshot's pending overlays; they are kept until it runs again",
                        retry=True,
                        mine=True,
                    )
                for d in ours:
                    self._hv.merge_writes(str(machine_uid), d.target, timeout=self._commit_timeout)
                self._discard(snap)
        else:
            self._discard(snap)
        self._drop_finalizer(snap)
        self._store.event(
            snap,
            reason=c.EVENT_SNAPSHOT_VOLUMES_DELETED,
            message=f"the snapshot's volumes were deleted from host {self._host}",
        )
        return Outcome()

    def _dependents(self, snap: Obj, uid: str) -> list[str]:
        """Volumes of this host, in any pool, built on this snapshot's copies (see `dependents`)."""
        recorded = {str(p) for p in (snap.get("status") or {}).get("pools") or []}
        if not recorded:
            return []
        volumes = {pool: self._hv.list_volumes(pool) for pool in recorded}
        copies = [v.path for vols in volumes.values() for v in vols if owned_by(v.name, uid)]
        if not copies:
            return []
        for pool in sorted(self._hv.host_facts().pools - recorded):
            with contextlib.suppress(NotFoundError):
                volumes[pool] = self._hv.list_volumes(pool)
        others = [
            (f"{v.pool}/{v.name}", v.backing_path)
            for vols in volumes.values()
            for v in vols
            if not owned_by(v.name, uid)
        ]
        return dependents(copies, others)

    def _drop_finalizer(self, snap: Obj) -> None:
        finalizers = (snap.get("metadata") or {}).get("finalizers") or []
        self._store.set_snapshot_finalizers(
            snap, [f for f in finalizers if f != c.SNAPSHOT_FINALIZER]
        )

    def _with_finalizer(self, snap: Obj) -> Obj:
        finalizers = (snap.get("metadata") or {}).get("finalizers") or []
        if c.SNAPSHOT_FINALIZER in finalizers:
            return snap
        return self._store.set_snapshot_finalizers(snap, [*finalizers, c.SNAPSHOT_FINALIZER])

    # -- helpers -----------------------------------------------------------------------------

    def _volume(self, disk: SourceDisk) -> VolumeInfo:
        found = self._hv.find_volume(str(disk.pool), str(disk.volume))
        if found is None:
            raise NotFoundError(f"volume {disk.pool}/{disk.volume} of disk {disk.name!r} is gone")
        return found

    def _delete_volume(self, pool: str, name: str) -> None:
        with contextlib.suppress(NotFoundError):
            self._hv.delete_volume(pool, name)

    @contextlib.contextmanager
    def _machine(self, uuid: str) -> Iterator[bool]:
        """One snapshot pass per machine at a time (their pending overlays would collide)."""
        with self._busy_lock:
            free = uuid not in self._busy
            if free:
                self._busy.add(uuid)
        try:
            yield free
        finally:
            if free:
                with self._busy_lock:
                    self._busy.discard(uuid)

    def _source_record(self, source: _Source) -> dict[str, Any]:
        vm_meta = source.vm.get("metadata") or {}
        machine_meta = source.machine.get("metadata") or {}
        return {
            "virtualMachine": vm_meta.get("name"),
            "virtualMachineUid": vm_meta.get("uid"),
            "machine": machine_meta.get("name"),
            "machineUid": machine_meta.get("uid"),
            "powerState": "Running" if source.running else "Stopped",
            "spec": source.vm.get("spec") or {},
            "machineSpec": source.machine.get("spec") or {},
        }

    def _waiting(self, snap: Obj, why: str) -> Outcome:
        self._report(snap, c.SNAPSHOT_REASON_TAKING, f"waiting: {why}", retry=False, mine=True)
        return Outcome(requeue_after=_WAIT_SECONDS)

    def _report(self, snap: Obj, reason: str, message: str, *, retry: bool, mine: bool) -> Outcome:
        """Ready=False with `reason`; written and announced only when it changes. A report by a
        daemon that does not hold the snapshot (`mine` False) is written only if the object did
        not change since it was read, so among several daemons one writes it and posts its
        Event."""
        try:
            self._write(
                snap,
                {},
                reason=reason,
                message=message,
                status="False",
                conditional=not mine,
                warning=reason != c.SNAPSHOT_REASON_TAKING,
            )
        except StateConflictError:
            return Outcome(immediately=True)
        except ProviderError as err:
            # The report itself failed (the API server is away): the next pass says it.
            log.warning("snapshot: reporting %s failed: %s", reason, err)
            return Outcome(retry=True)
        return Outcome(retry=retry)

    def _write(
        self,
        snap: Obj,
        fields: Mapping[str, Any],
        *,
        reason: str,
        message: str,
        status: str,
        conditional: bool = False,
        warning: bool = False,
        event: bool = True,
    ) -> Obj:
        meta = snap.get("metadata") or {}
        current = snap.get("status") or {}
        before = find_condition(current.get("conditions"), c.SNAPSHOT_CONDITION_READY) or {}
        unchanged = (
            before.get("status") == status
            and before.get("reason") == reason
            and before.get("message") == message
            and all(current.get(k) == v for k, v in fields.items())
        )
        if unchanged:
            return snap
        generation = meta.get("generation")
        conditions = ready_condition(
            current.get("conditions"),
            status=status,
            reason=reason,
            message=message,
            generation=generation if isinstance(generation, int) else None,
            now=self._now(),
        )
        body = {**fields, "conditions": conditions}
        if isinstance(generation, int):
            body["observedGeneration"] = generation
        written = self._store.patch_snapshot_status(snap, body, conditional=conditional)
        # Progress messages change while waiting; only a new reason is worth an Event there.
        new_reason = before.get("reason") != reason
        new_message = reason != c.SNAPSHOT_REASON_TAKING and before.get("message") != message
        if event and (new_reason or new_message):
            self._store.event(written, reason=reason, message=message, warning=warning)
        return written


def _extension(fmt: str) -> str:
    return "qcow2" if fmt == "qcow2" else "raw"
