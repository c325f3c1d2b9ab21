"""One pass over one LibvirtMigration on one host: decide this host's step, take it, report.

Every daemon sees every migration; `phases` says which one acts (the source's daemon or the
target's) and what it does next, from the status alone, so a pass converges from any point the
previous one (or a restart) left. The decisions are pure (`phases`, `refusals`, `target_xml`,
`progress`); this module reads, acts through the driver and the store, and writes the status.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import random
import threading
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from generic import constants as vmapi
from generic.api import VirtualMachineSpec
from generic.formats import format_time
from generic.workqueue import Outcome
from libvirt_provider import constants as c
from libvirt_provider import naming
from libvirt_provider.api import LibvirtMachine
from libvirt_provider.driver.base import MigrationHypervisor
from libvirt_provider.driver.types import DomainState
from libvirt_provider.errors import NotFoundError, ProviderError, StateConflictError
from libvirt_provider.hosts import placement
from libvirt_provider.hosts.heartbeat import fresh
from libvirt_provider.hosts.inventory import parse_size
from libvirt_provider.hosts.machines import request_of
from libvirt_provider.hosts.placement import ZONE_LABEL, Usage
from libvirt_provider.hosts.view import host_views
from libvirt_provider.machine.reconciler import Incoming, definition_demand
from libvirt_provider.machine.teardown import Teardown
from libvirt_provider.migration.credentials import CredentialsProblemError
from libvirt_provider.migration.limits import MigrationLimits, Verdict, Watchdog, over_limit
from libvirt_provider.migration.phases import (
    Facts,
    Leftover,
    Role,
    Step,
    leftover,
    next_step,
    role_of,
    succeeded_condition,
    terminal,
)
from libvirt_provider.migration.progress import progress_of, result_of
from libvirt_provider.migration.refusals import Request, TargetFacts, refusal
from libvirt_provider.migration.store import MigrationKey, MigrationStore, Obj
from libvirt_provider.migration.target_choice import Choice, choose_target
from libvirt_provider.migration.target_xml import (
    UnmappedDiskError,
    domain_needs,
    memory_bytes,
    target_xml,
)
from libvirt_provider.migration_api import MigrationPhase

__all__ = ["MigrationReconciler"]

log = logging.getLogger(__name__)

DONE = Outcome()
AGAIN = Outcome(immediately=True)
RETRY = Outcome(retry=True)
IMAGE_POLL = Outcome(requeue_after=3.0)
SLOT_WAIT = Outcome(requeue_after=c.MIGRATION_SLOT_RECHECK_SECONDS)
CLEANUP_WAIT = Outcome(requeue_after=c.MIGRATION_TARGET_GONE_RECHECK_SECONDS)
TARGET_WATCH = Outcome(requeue_after=c.MIGRATION_TARGET_WATCH_SECONDS)


def _status(obj: Obj) -> dict[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, dict) else {}


def _phase(obj: Obj) -> MigrationPhase | None:
    raw = _status(obj).get("phase")
    try:
        return MigrationPhase(raw) if raw else None
    except ValueError:
        return None


def _meta(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _key_of(obj: Obj) -> MigrationKey:
    meta = _meta(obj)
    return MigrationKey(str(meta.get("namespace")), str(meta.get("name")))


def _ready(host: Obj) -> bool:
    for cond in _status(host).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == c.HOST_CONDITION_READY:
            return bool(cond.get("status") == vmapi.STATUS_TRUE)
    return False


def _figures(result: dict[str, int]) -> str:
    """What libvirt measured, for the Succeeded message and Event."""
    parts = []
    if "downtimeMilliseconds" in result:
        parts.append(f"{result['downtimeMilliseconds']} ms of downtime")
    if "elapsedMilliseconds" in result:
        parts.append(f"{result['elapsedMilliseconds']} ms in all")
    if "memoryProcessed" in result:
        parts.append(f"{result['memoryProcessed']} bytes of memory")
    if "diskProcessed" in result:
        parts.append(f"{result['diskProcessed']} bytes of disk sent")
    return f": {', '.join(parts)}" if parts else ""


def _ns_name(obj: Obj) -> tuple[str, str]:
    meta = _meta(obj)
    return str(meta.get("namespace")), str(meta.get("name"))


@dataclasses.dataclass
class _Watch:
    """What the passes over one running copy learned so far."""

    # The guest's memory size, from its definition (the watchdog's deadline counts it).
    memory_bytes: int = 0
    last: dict[str, int] = dataclasses.field(default_factory=dict)
    aborted: bool = False
    machine_gone: bool = False
    given_up: Verdict | None = None
    _watchdog: Watchdog | None = None

    def watchdog(self, limits: MigrationLimits, now: dt.datetime) -> Watchdog:
        if self._watchdog is None:
            self._watchdog = Watchdog(limits, started=now, memory_bytes=self.memory_bytes)
        return self._watchdog


def _target_facts(
    host: Obj | None, heartbeat: dt.datetime | None, now: dt.datetime, grace: float
) -> TargetFacts | None:
    """The target as the refusals judge it: Ready only with its condition True and a fresh
    heartbeat (a daemon that died leaves its last `Ready` in the status)."""
    if host is None:
        return None
    offers = _status(host).get("offers") or {}
    return TargetFacts(
        ready=_ready(host) and fresh(heartbeat, now, grace),
        cordoned=bool((host.get("spec") or {}).get("unschedulable")),
        networks=frozenset(str(n) for n in offers.get("networks") or []),
        pools=frozenset(str(p) for p in offers.get("pools") or []),
        zone=(_meta(host).get("labels") or {}).get(ZONE_LABEL),
    )


class MigrationReconciler:
    """This host's steps of every migration (docs/migration.md)."""

    def __init__(
        self,
        *,
        store: MigrationStore,
        hypervisor: MigrationHypervisor,
        host: str,
        prepare: Callable[[Obj], Incoming],
        released: Callable[[str, str], None] = lambda _ns, _name: None,
        migration_uri: str | None = None,
        pkipath: str | None = None,
        credentials: Callable[[], str | None] | None = None,
        zone: Callable[[], str | None] = lambda: None,
        console_log_dir: str | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        progress_seconds: float = c.MIGRATION_PROGRESS_SECONDS,
        limits: MigrationLimits | None = None,
        heartbeat_grace: float = c.HEARTBEAT_GRACE_SECONDS,
        collision_delay: Callable[[], float] = lambda: random.uniform(
            *c.MIGRATION_CLAIM_RETRY_SECONDS
        ),
    ) -> None:
        self._store = store
        self._collision_delay = collision_delay
        self._grace = heartbeat_grace
        self._hv = hypervisor
        self._host = host
        self._prepare = prepare
        self._released = released
        self._uri = migration_uri
        # The pkipath folder a copy's URI names, asked before each use: with --migration-secret
        # it is written from the Secret then, or refuses (CredentialsProblemError).
        self._credentials = credentials or (lambda: pkipath)
        self._zone = zone
        self._clock = clock
        self._progress_seconds = progress_seconds
        self.limits = limits or MigrationLimits()
        # Accepting is counted against the limits and recorded under one lock, so this host's
        # workers never start more than its limit; the migrations waiting for a slot are woken
        # when another ends (`waiting`).
        self._accepting = threading.RLock()
        self._waiting: set[MigrationKey] = set()
        self._teardown = Teardown(
            hypervisor=hypervisor, events=store, console_log_dir=console_log_dir
        )

    def waiting(self) -> list[MigrationKey]:
        """The migrations this host holds back for a slot (to wake when one ends)."""
        with self._accepting:
            return sorted(self._waiting)

    def reconcile(self, key: MigrationKey) -> Outcome:
        try:
            return self._pass(key)
        except StateConflictError:
            return AGAIN
        except ProviderError as err:
            log.warning("migration %s/%s: %s; retrying", key.namespace, key.name, err)
            return RETRY

    def _pass(self, key: MigrationKey) -> Outcome:
        obj = self._store.get_migration(key.namespace, key.name)
        if obj is None:
            with self._accepting:
                self._waiting.discard(key)
            return DONE
        status = _status(obj)
        spec = obj.get("spec") or {}
        machine = self._store.get_machine(key.namespace, str(spec.get("machineName")))
        machine_host = ((machine or {}).get("spec") or {}).get("host")
        role = role_of(
            self._host,
            machine_host=str(machine_host) if machine_host else None,
            source=status.get("source"),
            target=status.get("target"),
        )
        if role is Role.NONE and not status.get("source") and not machine_host:
            # No machine, or one no host serves yet: no source to ask, so the first daemon to
            # look fails it (every daemon would write the same); so is one that waited for a
            # slot meanwhile.
            if _phase(obj) in (None, MigrationPhase.PENDING):
                if machine is None:
                    return self._fail(
                        obj,
                        c.MIGRATION_REASON_MACHINE_NOT_FOUND,
                        "there is no LibvirtMachine "
                        f"{spec.get('machineName')!r} in namespace {key.namespace!r}",
                    )
                return self._fail(
                    obj,
                    c.MIGRATION_REASON_MACHINE_NOT_BOUND,
                    "the machine has no host yet: there is nothing to move",
                )
            return DONE
        facts = Facts(
            phase=_phase(obj),
            prepared=bool(status.get("preparedVolumes")),
            handed_over=bool(status.get("handedOver")),
            target_cleaned=bool(status.get("targetCleaned")),
            deleting=bool(_meta(obj).get("deletionTimestamp")),
            target_gone=self._target_gone(role, obj),
        )
        step = next_step(role, facts)
        if step in (Step.WAIT, Step.AWAIT_CLEANUP) and role is Role.SOURCE and machine is not None:
            self._unlock(obj, machine, only_here=True)
        if step is Step.AWAIT_CLEANUP:
            return CLEANUP_WAIT
        handler = {
            Step.ACCEPT: self._accept,
            Step.PREPARE: self._prepare_target,
            Step.MIGRATE: self._migrate,
            Step.FINISH: self._finish,
            Step.CANCEL: self._cancel,
            Step.CLEAN_TARGET: self._clean_target,
            Step.RELEASE: self._release,
            Step.AWAIT_TARGET: self._await_target,
        }.get(step)
        if handler is None:
            return DONE
        return handler(obj, machine)

    # -- status ------------------------------------------------------------------------------

    def _write(
        self,
        obj: Obj,
        fields: dict[str, Any],
        *,
        reason: str | None = None,
        message: str = "",
        succeeded: str = vmapi.STATUS_FALSE,
    ) -> Obj:
        patch = dict(fields)
        if reason is not None:
            patch["conditions"] = succeeded_condition(
                _status(obj).get("conditions"),
                status=succeeded,
                reason=reason,
                message=message,
                generation=_meta(obj).get("generation"),
                now=format_time(self._clock()),
            )
        return self._store.patch_migration_status(obj, patch)

    def _fail(
        self,
        obj: Obj,
        reason: str,
        message: str,
        *,
        phase: MigrationPhase = MigrationPhase.FAILED,
        extra: dict[str, Any] | None = None,
    ) -> Outcome:
        self._not_waiting(obj)
        self._store.event(obj, reason=reason, message=message, warning=True)
        fields: dict[str, Any] = {
            "phase": phase.value,
            "completionTime": format_time(self._clock()),
            "progress": None,
            **(extra or {}),
        }
        self._write(obj, fields, reason=reason, message=message)
        return DONE

    # -- source: accept or refuse ------------------------------------------------------------

    def _accept(self, obj: Obj, machine: Obj | None) -> Outcome:
        assert machine is not None
        spec = obj.get("spec") or {}
        name = str(_meta(obj).get("name"))
        target = spec.get("targetHost")
        uid = str(_meta(machine).get("uid"))
        machine_status = _status(machine)
        lock = machine_status.get("migration") or {}
        ref = self._hv.lookup(uuid=uid, name=self._domain_name(machine))
        running = False
        networks: frozenset[str] = frozenset()
        pools: frozenset[str] = frozenset()
        if ref is not None:
            running = self._hv.status(ref.uuid).state is DomainState.RUNNING
            networks, pools = domain_needs(self._hv.domain_xml(ref.uuid, inactive=True))
        vm = self._linked_vm(machine)
        if not target and ref is not None and running:
            choice = self._choose(machine, vm, ref.uuid, networks, pools)
            if choice.host is None:
                return self._fail(
                    obj,
                    c.MIGRATION_REASON_NO_TARGET,
                    choice.message,
                    extra={"source": self._host, "machineUid": uid},
                )
            target = choice.host
            chosen = True
        else:
            chosen = False
        host_obj = self._store.get_host(str(target)) if target else None
        request = Request(
            migration=name,
            machine_host=self._host,
            target=str(target) if target else None,
            target_facts=self._facts_of(host_obj),
            running=running,
            power_state=machine_status.get("powerState"),
            failure_domain=((vm or {}).get("spec") or {}).get("failureDomain"),
            source_zone=self._zone(),
            locked_by=lock.get("name"),
            networks=networks,
            pools=pools,
        )
        refused = refusal(request)
        recorded = {"source": self._host, "target": target, "machineUid": uid}
        if refused is not None:
            return self._fail(obj, refused.reason, refused.message, extra=recorded)
        try:
            # Checked before the machine is locked and the target makes anything: a migration
            # that cannot be sent is refused at once rather than after the target's work.
            self._credentials()
        except CredentialsProblemError as problem:
            return self._fail(obj, problem.reason, problem.message, extra=recorded)
        with self._accepting:
            # Counted and recorded (phase Preparing) under the lock: this host's next accept
            # counts this one.
            verdict = self._over_limit(obj)
            collided = False
            if verdict is None:
                # Other hosts' daemons accept at the same moment: claim a slot, then count
                # again with every claim written before this one (`migration/limits.py`).
                obj = self._write(obj, {"slotClaimedAt": format_time(self._clock())})
                verdict = self._over_limit(obj)
                if verdict is not None:
                    obj = self._write(obj, {"slotClaimedAt": None})
                    collided = True
            if verdict is not None:
                self._waiting.add(_key_of(obj))
                return self._wait_for_slot(obj, verdict, collided=collided)
            self._waiting.discard(_key_of(obj))
            if chosen:
                self._store.event(
                    obj,
                    reason=c.EVENT_MIGRATION_SCHEDULED,
                    message=f"host {target} chosen by placement's filters (the least loaded "
                    "that fits)",
                )
            return self._start(obj, machine, name=name, target=str(target), recorded=recorded)

    def _over_limit(self, obj: Obj) -> Verdict | None:
        """Why `obj` must wait for a slot, counted from the migrations as they are now."""
        return over_limit(
            obj,
            self._store.list_migrations(),
            host=self._host,
            limits=self.limits,
            now=self._clock(),
        )

    def _facts_of(self, host: Obj | None) -> TargetFacts | None:
        if host is None:
            return None
        name = str(_meta(host).get("name"))
        beat = self._store.heartbeats().get(name)
        return _target_facts(host, beat, self._clock(), self._grace)

    def _await_target(self, obj: Obj, _machine: Obj | None) -> Outcome:
        """Source, while the target prepares: a target that stops serving before it prepared
        (its daemon or libvirtd gone: no fresh heartbeat, or not Ready) would leave the
        machine locked and the migration Preparing for ever, so it ends the migration."""
        target = str(_status(obj).get("target") or "")
        facts = self._facts_of(self._store.get_host(target)) if target else None
        if facts is not None and facts.ready:
            return TARGET_WATCH
        why = (
            f"there is no LibvirtHost {target!r} any more"
            if facts is None
            else f"host {target} is not Ready any more (no heartbeat within {self._grace:g} s, "
            "or its libvirtd is not serving)"
        )
        return self._fail(
            obj,
            c.MIGRATION_REASON_TARGET_NOT_READY,
            f"{why} before it prepared the machine's volumes; nothing was copied and the "
            f"machine keeps running on host {self._host}",
        )

    def _wait_for_slot(self, obj: Obj, verdict: Verdict, *, collided: bool = False) -> Outcome:
        """Pending with the limit's reason (an Event when it first says so); looked at again
        when a migration ends, or after a while without that. A claim that met others' claims
        is tried again after a short random delay: the claims withdrawn, nothing ends to wake
        it, and sources that collided once must not keep colliding."""
        current = next(
            (
                cond
                for cond in _status(obj).get("conditions") or []
                if isinstance(cond, dict) and cond.get("type") == c.MIGRATION_CONDITION_SUCCEEDED
            ),
            {},
        )
        if current.get("reason") != verdict.reason:
            self._store.event(obj, reason=verdict.reason, message=verdict.message)
        if current.get("reason") != verdict.reason or current.get("message") != verdict.message:
            self._write(
                obj,
                {"phase": MigrationPhase.PENDING.value},
                reason=verdict.reason,
                message=verdict.message,
            )
        if collided:
            return Outcome(requeue_after=self._collision_delay())
        return SLOT_WAIT

    def _not_waiting(self, obj: Obj) -> None:
        with self._accepting:
            self._waiting.discard(_key_of(obj))

    def _start(
        self, obj: Obj, machine: Obj, *, name: str, target: str, recorded: dict[str, Any]
    ) -> Outcome:
        """Lock the machine, keep the migration (finalizer), Preparing: the target's turn."""
        lock = _status(machine).get("migration") or {}
        # The machine's lock first, conditioned on the machine as read: a second migration that
        # read it unlocked at the same time fails this write and is refused on its next pass.
        if lock.get("name") != name:
            self._store.patch_machine_status(
                machine, {"migration": {"name": name, "target": target}}, conditional=True
            )
        finalizers = list(_meta(obj).get("finalizers") or [])
        if c.MIGRATION_FINALIZER not in finalizers:
            obj = self._store.set_migration_finalizers(obj, [*finalizers, c.MIGRATION_FINALIZER])
        message = f"moving the machine from host {self._host} to {target}: preparing the target"
        self._store.event(obj, reason=c.EVENT_MIGRATION_STARTED, message=message)
        self._write(
            obj,
            {
                **recorded,
                "phase": MigrationPhase.PREPARING.value,
                "startTime": format_time(self._clock()),
                "slotClaimedAt": None,
            },
            reason=c.MIGRATION_REASON_PREPARING,
            message=message,
        )
        return DONE

    def choose_for(self, machine: Obj) -> Choice:
        """Where a migration of `machine` (this host's) that names no target would go now: a
        drain's plan (`migration/drain.py`) shows it."""
        ref = self._hv.lookup(uuid=str(_meta(machine).get("uid")), name=self._domain_name(machine))
        if ref is None:
            return Choice(None, f"its domain is not on host {self._host}")
        networks, pools = domain_needs(self._hv.domain_xml(ref.uuid, inactive=True))
        return self._choose(machine, self._linked_vm(machine), ref.uuid, networks, pools)

    def _linked_vm(self, machine: Obj) -> Obj | None:
        """The VirtualMachine the machine is linked to (a migration is in its namespace)."""
        vm_name = (_meta(machine).get("annotations") or {}).get(vmapi.LINK_ANNOTATION)
        if not vm_name:
            return None
        return self._store.get_virtual_machine(str(_meta(machine).get("namespace")), str(vm_name))

    def _choose(
        self,
        machine: Obj,
        vm: Obj | None,
        uuid: str,
        networks: frozenset[str],
        pools: frozenset[str],
    ) -> Choice:
        """The target for a migration that names none: placement's filters for a new machine
        (`migration/target_choice.py`), never this host."""
        now = self._clock()
        views = host_views(self._store.list_hosts(), self._store.heartbeats(), now, self._grace)
        allocated = {}
        for obj in self._store.list_hosts():
            figures = _status(obj).get("allocated") or {}
            allocated[str(_meta(obj).get("name"))] = Usage(
                cpus=int(figures.get("cpus") or 0), memory=parse_size(figures.get("memory"))
            )
        try:
            request = request_of(
                LibvirtMachine.model_validate(machine),
                VirtualMachineSpec.model_validate((vm or {}).get("spec") or {}),
            )
        except ValidationError:
            request = placement.Request(namespace=str(_meta(machine).get("namespace")))
        return choose_target(
            request,
            source=self._host,
            hosts=views,
            allocated=allocated,
            demand=definition_demand(self._hv.domain_xml(uuid, inactive=True)),
            networks=networks,
            pools=pools,
        )

    # -- target: prepare ---------------------------------------------------------------------

    def _prepare_target(self, obj: Obj, machine: Obj | None) -> Outcome:
        if self._uri is None:
            return self._fail(
                obj,
                c.MIGRATION_REASON_TARGET_NOT_MIGRATABLE,
                f"host {self._host} takes no migrations (its daemon runs without "
                "--migration-uri); nothing was made there",
                extra={"targetCleaned": True},
            )
        if machine is None:
            return self._fail(
                obj,
                c.MIGRATION_REASON_MACHINE_NOT_FOUND,
                "the machine was deleted",
                extra={"targetCleaned": True},
            )
        incoming = self._prepare(machine)
        if incoming.problem is not None:
            reason, detail = incoming.problem
            return self._fail(
                obj,
                c.MIGRATION_REASON_TARGET_UNSUITABLE,
                f"host {self._host} cannot take the machine ({reason}): {detail}; nothing was "
                "made there",
                extra={"targetCleaned": True},
            )
        if incoming.waiting is not None:
            self._write(
                obj, {}, reason=c.MIGRATION_REASON_WAITING_FOR_IMAGE, message=incoming.waiting
            )
            return IMAGE_POLL
        volumes = [
            {"pool": pool, "volume": volume, "path": path}
            for pool, volume, path in incoming.volumes or []
        ]
        message = f"host {self._host} made the machine's {len(volumes)} volumes"
        self._store.event(obj, reason=c.EVENT_MIGRATION_TARGET_PREPARED, message=message)
        self._write(
            obj,
            {"preparedVolumes": volumes, "targetUri": self._uri},
            reason=c.MIGRATION_REASON_PREPARING,
            message=message + "; the source copies them next",
        )
        return DONE

    # -- source: copy and hand over ----------------------------------------------------------

    def _migrate(self, obj: Obj, machine: Obj | None) -> Outcome:
        status = _status(obj)
        uid = str(status.get("machineUid") or _meta(machine or {}).get("uid"))
        target = str(status.get("target"))
        going = machine is None or bool(_meta(machine).get("deletionTimestamp"))
        name = self._domain_name(machine) if machine is not None else f"uuid-{uid}"
        ref = self._hv.lookup(uuid=uid, name=name)
        if ref is not None and self._hv.job_stats(uid) is not None:
            # libvirt still runs a copy this daemon started before it was restarted (or before
            # an error ended its pass): a second migrateToURI3 would fail at once while the
            # copy went on unwatched, so follow the running job instead.
            log.info("migration %s/%s: following the copy libvirt runs already", *_ns_name(obj))
            outcome = self._follow(obj, uid, name, going=going)
            if outcome is not None:
                return outcome
            obj = self._store.get_migration(*_ns_name(obj)) or obj
        elif ref is not None and going:
            return self._machine_deleted(obj, copying=False)
        elif ref is not None:
            try:
                # Again before the copy: the Secret may have changed since the accept (a
                # rotation is written now; a deletion refuses, and the target cleans up).
                pkipath = self._credentials()
            except CredentialsProblemError as problem:
                return self._fail(obj, problem.reason, problem.message)
            volumes = {
                str(v.get("volume")): (str(v.get("pool")), str(v.get("path")))
                for v in status.get("preparedVolumes") or []
            }
            try:
                dest = target_xml(self._hv.migratable_xml(uid), volumes, files=True)
                persist = target_xml(
                    self._hv.migratable_xml(uid, inactive=True), volumes, files=False
                )
            except UnmappedDiskError as err:
                return self._fail(obj, c.MIGRATION_REASON_MIGRATION_FAILED, str(err))
            if _phase(obj) is not MigrationPhase.MIGRATING:
                obj = self._write(
                    obj,
                    {"phase": MigrationPhase.MIGRATING.value},
                    reason=c.MIGRATION_REASON_MIGRATING,
                    message=f"copying the machine's memory and disks to host {target}",
                )
            uri = str(status.get("targetUri"))
            if pkipath:
                uri += f"?pkipath={pkipath}"
            outcome = self._copy(obj, uid, uri, dest, persist)
            if outcome is not None:
                return outcome
            obj = self._store.get_migration(*_ns_name(obj)) or obj
        if machine is None:
            # Neither the domain nor the machine is here: nothing left to hand over.
            return self._machine_deleted(obj, copying=False)
        return self._hand_over(obj, machine, uid, target)

    def _copy(self, obj: Obj, uid: str, uri: str, dest: str, persist: str) -> Outcome | None:
        """Run the migration, writing the source's job statistics into the status meanwhile and
        aborting it when the migration (or the machine) is deleted; None once the domain runs
        on the target."""
        errors: list[ProviderError] = []

        auto_converge = bool((obj.get("spec") or {}).get("autoConverge"))

        def run() -> None:
            try:
                self._hv.migrate(
                    uid, uri=uri, dest_xml=dest, persist_xml=persist, auto_converge=auto_converge
                )
            except ProviderError as err:
                errors.append(err)

        thread = threading.Thread(target=run, name=f"migrate-{uid[:8]}", daemon=True)
        thread.start()
        watch = _Watch(memory_bytes=memory_bytes(dest))
        while thread.is_alive():
            thread.join(self._progress_seconds)
            if not thread.is_alive():
                break
            obj = self._tick(obj, uid, watch)
        return self._copy_outcome(obj, watch, failed=errors[0] if errors else None)

    def _follow(self, obj: Obj, uid: str, name: str, *, going: bool) -> Outcome | None:
        """Watch a copy libvirt runs already, as `_copy` watches its own, until libvirt's job
        ends (aborted at once when the machine is being deleted); None once the domain left
        this host."""
        watch = _Watch(memory_bytes=self._memory_bytes(uid))
        if going:
            self._hv.abort_job(uid)
            watch.aborted = watch.machine_gone = True
        pause = threading.Event()
        while True:
            try:
                if self._hv.job_stats(uid) is None:
                    break
            except ProviderError as err:
                log.warning("migration %s/%s: reading its job: %s", *_ns_name(obj), err)
            obj = self._tick(obj, uid, watch)
            pause.wait(self._progress_seconds)
        if self._hv.lookup(uuid=uid, name=name) is None:
            return None
        still = ProviderError(
            f"the copy libvirt was running when this daemon looked again ended with the domain "
            f"still on host {self._host}"
        )
        return self._copy_outcome(obj, watch, failed=still)

    def _memory_bytes(self, uid: str) -> int:
        """The guest's memory size from its running definition; 0 when it cannot be read (the
        watchdog then counts what libvirt reports alone)."""
        try:
            return memory_bytes(self._hv.migratable_xml(uid))
        except ProviderError:
            return 0

    def _tick(self, obj: Obj, uid: str, watch: _Watch) -> Obj:
        """One look at a running copy: its progress into the status; aborted when the migration
        or the machine is deleted, or when the watchdog gives up on it."""
        ns, name = _ns_name(obj)
        try:
            stats = self._hv.job_stats(uid)
            if stats:
                watch.last = progress_of(stats)
                obj = self._store.patch_migration_status(obj, {"progress": watch.last})
            verdict = watch.watchdog(self.limits, self._clock()).observe(self._clock(), stats)
            current = self._store.get_migration(ns, name)
            if watch.aborted:
                return obj
            if current is None or _meta(current).get("deletionTimestamp"):
                log.info("migration %s/%s deleted while it runs: aborting", ns, name)
                self._hv.abort_job(uid)
                watch.aborted = True
            elif self._machine_going(current or obj):
                log.info("migration %s/%s: its machine is being deleted: aborting", ns, name)
                self._hv.abort_job(uid)
                watch.aborted = watch.machine_gone = True
            elif watch.given_up is None and verdict is not None:
                log.warning("migration %s/%s: %s", ns, name, verdict.message)
                watch.given_up = verdict
                self._hv.abort_job(uid)
        except ProviderError as err:
            log.warning("migration %s/%s: reading its progress: %s", ns, name, err)
        return obj

    def _machine_going(self, obj: Obj) -> bool:
        machine = self._store.get_machine(
            str(_meta(obj).get("namespace")), str((obj.get("spec") or {}).get("machineName"))
        )
        return machine is None or bool(_meta(machine).get("deletionTimestamp"))

    def _machine_deleted(self, obj: Obj, *, copying: bool) -> Outcome:
        done = "the copy was aborted" if copying else "nothing was copied"
        return self._fail(
            obj,
            c.MIGRATION_REASON_MACHINE_DELETED,
            f"cancelled: the machine is being deleted; {done}, and it is deleted on host "
            f"{self._host}",
            phase=MigrationPhase.CANCELLED,
        )

    def _copy_outcome(
        self, obj: Obj, watch: _Watch, *, failed: ProviderError | None
    ) -> Outcome | None:
        """How a watched copy ended: None when it moved the domain, otherwise the migration's
        end (the watchdog's verdict, a cancel, or libvirt's failure)."""
        given_up, aborted, last = watch.given_up, watch.aborted, watch.last
        errors = [failed] if failed is not None else []
        if last:
            obj = self._store.patch_migration_status(obj, {"progress": last})
        if errors and watch.machine_gone:
            return self._machine_deleted(obj, copying=True)
        if errors:
            if given_up is not None and not aborted:
                return self._fail(
                    obj,
                    given_up.reason,
                    f"{given_up.message}; the machine keeps running on host {self._host}",
                )
            if aborted:
                message = (
                    f"cancelled: the migration was deleted while it ran; the job was aborted and "
                    f"the machine keeps running on host {self._host}"
                )
                return self._fail(
                    obj, c.MIGRATION_REASON_CANCELLED, message, phase=MigrationPhase.CANCELLED
                )
            return self._fail(
                obj,
                c.MIGRATION_REASON_MIGRATION_FAILED,
                f"libvirt failed the migration (the machine keeps running on host "
                f"{self._host}): {errors[0]}",
            )
        return None

    def _hand_over(self, obj: Obj, machine: Obj, uid: str, target: str) -> Outcome:
        """The domain left this host: delete this host's volumes of the machine, then bind the
        machine to the target (status first: its providerID names where the domain is)."""
        domain_name = self._domain_name(machine)
        self._teardown.run(machine, uuid=uid, domain_name=domain_name, keep=set())
        self._store.event(
            obj,
            reason=c.EVENT_MIGRATION_SOURCE_CLEANED,
            message=f"host {self._host} deleted its volumes of the machine",
        )
        metadata = dict(_status(machine).get("providerMetadata") or {})
        metadata["host"] = target
        machine = self._store.patch_machine_status(
            machine,
            {"providerID": f"libvirt://{target}/{uid}", "providerMetadata": metadata},
        )
        if (machine.get("spec") or {}).get("host") != target:
            self._store.move_machine(machine, target)
        self._released(str(_meta(machine).get("namespace")), str(_meta(machine).get("name")))
        message = f"the machine runs on host {target}; host {self._host} holds nothing of it"
        self._store.event(machine, reason=c.EVENT_MACHINE_MIGRATED, message=message)
        self._write(
            obj, {"handedOver": True}, reason=c.MIGRATION_REASON_HANDING_OVER, message=message
        )
        return DONE

    # -- target: finish ----------------------------------------------------------------------

    def _finish(self, obj: Obj, machine: Obj | None) -> Outcome:
        status = _status(obj)
        uid = str(status.get("machineUid"))
        completed = self._hv.completed_job_stats(uid) or {}
        result = result_of(completed, status.get("progress"))
        message = f"moved from host {status.get('source')} to {self._host}" + _figures(result)
        self._store.event(obj, reason=c.MIGRATION_REASON_SUCCEEDED, message=message)
        obj = self._write(
            obj,
            {
                "phase": MigrationPhase.SUCCEEDED.value,
                "completionTime": format_time(self._clock()),
                "result": result,
                "progress": None,
            },
            reason=c.MIGRATION_REASON_SUCCEEDED,
            message=message,
            succeeded=vmapi.STATUS_TRUE,
        )
        if machine is not None:
            self._unlock(obj, machine, only_here=True)
        return DONE

    # -- cancel, clean, release --------------------------------------------------------------

    def _cancel(self, obj: Obj, machine: Obj | None) -> Outcome:
        self._not_waiting(obj)
        message = (
            f"cancelled: the migration was deleted before the copy began; the machine keeps "
            f"running on host {self._host}"
        )
        self._store.event(obj, reason=c.MIGRATION_REASON_CANCELLED, message=message, warning=True)
        obj = self._write(
            obj,
            {"phase": MigrationPhase.CANCELLED.value, "completionTime": format_time(self._clock())},
            reason=c.MIGRATION_REASON_CANCELLED,
            message=message,
        )
        if machine is not None:
            self._unlock(obj, machine, only_here=True)
        return AGAIN

    def _clean_target(self, obj: Obj, machine: Obj | None) -> Outcome:
        status = _status(obj)
        uid = str(status.get("machineUid"))
        ref = self._hv.lookup(uuid=uid, name=f"uuid-{uid}")
        found = leftover(self._hv.status(ref.uuid).state if ref is not None else None)
        if found is Leftover.KEEP:
            # The domain runs here after all (a job libvirt finished as it was failed): the
            # volumes are its disks now.
            log.warning("migration of %s failed, but its domain runs on this host: kept", uid)
        else:
            if found is Leftover.REMOVE and ref is not None:
                log.warning("migration of %s failed: removing its unfinished incoming domain", uid)
                self._remove_domain(ref.uuid)
            for volume in status.get("preparedVolumes") or []:
                with contextlib.suppress(NotFoundError):
                    self._hv.delete_volume(str(volume.get("pool")), str(volume.get("volume")))
            self._store.event(
                obj,
                reason=c.EVENT_MIGRATION_TARGET_CLEANED,
                message=f"host {self._host} deleted the volumes it had prepared",
            )
        self._store.patch_migration_status(obj, {"targetCleaned": True})
        return DONE

    def _remove_domain(self, uuid: str) -> None:
        """Destroy (and undefine, if it was defined) a domain this host must not keep."""
        with contextlib.suppress(NotFoundError):
            self._hv.destroy(uuid)
        with contextlib.suppress(NotFoundError):
            if self._hv.lookup(uuid=uuid, name=f"uuid-{uuid}") is not None:
                self._hv.undefine(uuid)

    def _target_gone(self, role: Role, obj: Obj) -> bool:
        """Whether a deleted migration's target host no longer exists (only the source, which
        releases the migration, asks)."""
        target = _status(obj).get("target")
        if role is not Role.SOURCE or not target or not _meta(obj).get("deletionTimestamp"):
            return False
        return self._store.get_host(str(target)) is None

    def _release(self, obj: Obj, machine: Obj | None) -> Outcome:
        if machine is not None:
            self._unlock(obj, machine, only_here=True)
        status = _status(obj)
        if status.get("preparedVolumes") and not status.get("targetCleaned"):
            names = ", ".join(
                f"{v.get('pool')}/{v.get('volume')}" for v in status.get("preparedVolumes") or []
            )
            self._store.event(
                obj,
                reason=c.EVENT_MIGRATION_TARGET_GONE,
                message=(
                    f"host {status.get('target')} no longer exists, so nothing deleted the "
                    f"volumes it had prepared ({names}); the migration is released without them"
                ),
                warning=True,
            )
        finalizers = [f for f in _meta(obj).get("finalizers") or [] if f != c.MIGRATION_FINALIZER]
        if len(finalizers) != len(_meta(obj).get("finalizers") or []):
            self._store.set_migration_finalizers(obj, finalizers)
        return DONE

    def _unlock(self, obj: Obj, machine: Obj, *, only_here: bool) -> None:
        """Remove the machine's lock if it names this migration (and, with `only_here`, the
        machine is this host's: each daemon writes its own machines)."""
        lock = _status(machine).get("migration") or {}
        if lock.get("name") != _meta(obj).get("name"):
            return
        if only_here and (machine.get("spec") or {}).get("host") != self._host:
            return
        if not terminal(_phase(obj)):
            return
        self._store.patch_machine_status(machine, {"migration": None})

    def _domain_name(self, machine: Obj) -> str:
        meta = _meta(machine)
        recorded = (_status(machine).get("providerMetadata") or {}).get("domainName")
        return naming.machine_domain_name(
            str(meta.get("namespace")),
            str(meta.get("name")),
            str(meta.get("uid")),
            recorded=recorded if isinstance(recorded, str) else None,
        )
