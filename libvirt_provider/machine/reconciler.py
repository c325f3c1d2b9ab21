"""One level-triggered pass over one LibvirtMachine: gather, decide, act, report.

Every pass looks at the whole state again (the LibvirtMachine, its VirtualMachine, the catalog, the
Secrets, and the domain as libvirt has it) and takes at most the steps needed to move toward the
spec, so it converges from any starting point: a first pass, a pass after a crash between define
and start, a pass after libvirtd restarted.

This module only sequences. Gathering is `inputs`; the decisions are pure (`linkage`, the
resolver, `power`, `status`); the acts are `create`, `update`, `powering` and `teardown`. Each step
returns what it learned, and the pass ends with one status write (none when nothing changed) and
an `Outcome` that tells the work queue when to look again, or to back off after a failure.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter
from pydantic import ValidationError

from generic import constants as vmapi
from generic.api import VirtualMachineSpec
from generic.conditions import find_condition
from generic.formats import format_time, merge_patch, validation_message
from generic.workqueue import Outcome
from libvirt_provider import constants as c
from libvirt_provider.api import LibvirtMachine
from libvirt_provider.domainxml import interface_macs, owned_fields, pool_volumes
from libvirt_provider.driver.base import Hypervisor
from libvirt_provider.driver.types import DomainState
from libvirt_provider.errors import (
    ForeignDomainError,
    HostUnreachableError,
    NotFoundError,
    ProviderError,
    RetryableError,
    StateConflictError,
)
from libvirt_provider.hosts.inventory import Demand, demand_of
from libvirt_provider.hosts.machines import preempted_at, request_of
from libvirt_provider.hosts.placement import HostView
from libvirt_provider.images.importer import ImageImporter
from libvirt_provider.machine.addresses import AddressClaims, Reservations, held_addresses
from libvirt_provider.machine.agent_backoff import AgentBackoff
from libvirt_provider.machine.book import HostBook, Refusal
from libvirt_provider.machine.create import Creation
from libvirt_provider.machine.disk_status import applied_disks, infeasible_disks
from libvirt_provider.machine.hold import RestoreHold, restore_hold
from libvirt_provider.machine.inputs import (
    InputReader,
    PowerIntent,
    power_intent,
    wants_public_address,
)
from libvirt_provider.machine.power import observed_power_state
from libvirt_provider.machine.powering import PowerDriver
from libvirt_provider.machine.status import (
    Readiness,
    assess_readiness,
    compute_status,
    created_on,
    failed,
    problem_reason,
    retained_record,
)
from libvirt_provider.machine.store import MachineKey, MachineStore, Obj
from libvirt_provider.machine.teardown import Teardown
from libvirt_provider.machine.update import DomainUpdater
from libvirt_provider.resolved import ResolvedMachine

__all__ = ["Incoming", "MachineKey", "MachineReconciler", "MachineStore", "migrating_away"]

log = logging.getLogger(__name__)

RECONCILE_ERRORS = Counter(
    "vmapi_libvirt_machine_reconcile_errors_total",
    "LibvirtMachine reconciles that ended in a problem, by reason: the InfrastructureReady "
    "reason they reported, or the error's class when no status could be written.",
    ["reason"],
)

CONVERGING_DELAY = 2.0
CONVERGING = Outcome(requeue_after=CONVERGING_DELAY)
DONE = Outcome()
AGAIN = Outcome(immediately=True)
# Failures go back to the work queue's per-machine exponential backoff (with jitter, capped):
# a step that fails identically every time (a missing folder, a permission) is tried a few dozen
# times an hour, never in a loop that creates and removes the domain.
RETRY = Outcome(retry=True)

_UNWATCHED_INPUTS = frozenset({c.REASON_SECRET_NOT_FOUND, c.REASON_SECRET_NOT_READABLE})


@dataclass(frozen=True)
class Report:
    """What a pass concluded, for the status it writes."""

    readiness: Readiness
    domain_uuid: str | None = None
    power_state: str | None = None
    addresses: list[dict[str, str]] = field(default_factory=list)
    guest: dict[str, str] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)
    shutdown_requested_at: dt.datetime | None = None
    retained: list[str] | None = None
    """`pool/volume` of the disks kept at deletion, when this pass resolved the machine."""
    disks: list[dict[str, Any]] | None = None
    """status.disks (their VolumeAttributesClasses); None keeps what status says."""
    restore_held: bool = False
    """The machine is off and kept off for the LibvirtRestore holding it (`machine/hold.py`)."""


def _status_disks(obj: Obj) -> list[Any] | None:
    disks = (obj.get("status") or {}).get("disks")
    return disks if isinstance(disks, list) else None


def _key(machine: LibvirtMachine) -> str:
    return f"{machine.metadata.namespace}/{machine.metadata.name}"


def definition_demand(xml: str) -> Demand:
    """What a domain takes by its definition: vCPUs and current memory (its volumes' sizes are
    not in it)."""
    compute = owned_fields(xml).compute
    return Demand(cpus=compute.vcpus or 0, memory=(compute.memory_current_kib or 0) * 1024)


@dataclass(frozen=True)
class Incoming:
    """What preparing a migration's target came to: the volumes made (pool, volume, path), a
    wait (an image is being imported), or a problem (reason, message)."""

    volumes: list[tuple[str, str, str]] | None = None
    waiting: str | None = None
    problem: tuple[str, str] | None = None


def migrating_away(obj: Obj, host: str) -> bool:
    """Whether a migration is moving `obj` from `host` to another host."""
    migration = (obj.get("status") or {}).get("migration") or {}
    target = migration.get("target")
    return bool(target) and target != host


class _StaleCopyError(Exception):
    """The machine's copy was older than the API server's object: the pass starts again."""


class MachineReconciler:
    def __init__(
        self,
        *,
        store: MachineStore,
        hypervisor: Hypervisor,
        host: str,
        domain_types: frozenset[str] | None = None,
        images: ImageImporter | None = None,
        console_log_dir: str | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        zone: Callable[[], str | None] = lambda: None,
        on_allocations_change: Callable[[], None] = lambda: None,
        agent_backoff: AgentBackoff | None = None,
        host_view: Callable[[], HostView | None] | None = None,
        built: Callable[[], Iterable[MachineKey]] = lambda: (),
        on_capacity_freed: Callable[[], None] = lambda: None,
        preemption_grace: int = c.PREEMPTION_GRACE_SECONDS,
    ) -> None:
        images = images or ImageImporter(hypervisor)
        self._store = store
        self._hv = hypervisor
        self._host = host
        self._clock = clock
        self._preemption_grace = preemption_grace
        self._inputs = InputReader(
            store=store,
            hypervisor=hypervisor,
            host=host,
            domain_types=domain_types,
            console_log_dir=console_log_dir,
            zone=zone,
        )
        self._creation = Creation(hypervisor=hypervisor, events=store, images=images)
        self._updater = DomainUpdater(hypervisor=hypervisor, events=store, images=images)
        self._power = PowerDriver(
            hypervisor=hypervisor, events=store, clock=clock, agent_backoff=agent_backoff
        )
        self._teardown = Teardown(
            hypervisor=hypervisor, events=store, console_log_dir=console_log_dir
        )
        self._claims = AddressClaims(store=store, host=host)
        self._reservations = Reservations(hypervisor)
        # When each machine's current run of failed passes began (see _problem).
        self._failing_since: dict[str, dt.datetime] = {}
        # What this host holds and has admitted: the "allocated" figures of its LibvirtHost.
        self._book = HostBook(
            host, view=host_view, on_change=on_allocations_change, on_freed=on_capacity_freed
        )
        # The machines of this host whose status shows a domain (from the watch), and those
        # passed once since the daemon started: a machine is admitted only once every machine
        # with a domain here is counted, so a restart never admits against a half-empty book.
        self._built = built
        self._passed: set[str] = set()
        # A machine listed with a domain that never shows up again (its finalizer removed by
        # hand between the start's list and the watch's) would hold admission back for good:
        # past this deadline the host admits against what it has counted, and says which not.
        self._counting_ends: dt.datetime | None = clock() + dt.timedelta(
            seconds=c.ADMISSION_COUNTING_SECONDS
        )

    def allocations(self) -> tuple[Demand, int]:
        """The sum of what this host's machines take, and how many there are."""
        return self._book.allocations()

    def preemptible(self) -> tuple[Demand, int]:
        """What this host's spot machines take of the allocations, and how many there are."""
        return self._book.preemptible()

    def refused(self) -> list[MachineKey]:
        """The machines this host last refused to admit."""
        return [MachineKey(*key.split("/", 1)) for key in self._book.refused()]

    def reconcile(self, key: MachineKey) -> Outcome:
        try:
            return self._reconcile(key)
        except ProviderError as err:
            # The API server or libvirtd failed where no status can be written (reading the
            # machine, changing its finalizers): back off and try again.
            log.warning("%s/%s: %s; retrying", key.namespace, key.name, err)
            RECONCILE_ERRORS.labels(reason=type(err).__name__).inc()
            return RETRY

    def _reconcile(self, key: MachineKey) -> Outcome:
        try:
            return self._pass(key)
        except _StaleCopyError:
            return AGAIN
        finally:
            # A machine absent from the copies is not counted by its pass (nothing was booked),
            # and one that is gone leaves no trace here.
            if self._store.get_machine(key.namespace, key.name) is None:
                self._passed.discard(f"{key.namespace}/{key.name}")
            else:
                self._passed.add(f"{key.namespace}/{key.name}")

    def _fresh(self, obj: Obj) -> None:
        """The rule for reads: a pass works from the watch-fed copy of the machine, but creating
        a domain or removing anything first reads the machine from the API server, and starts
        the pass again (`_StaleCopyError`) when the copy was behind."""
        meta = obj.get("metadata") or {}
        fresh = self._store.get_machine(
            str(meta.get("namespace")), str(meta.get("name")), fresh=True
        )
        if fresh is None or (fresh.get("metadata") or {}).get("resourceVersion") != meta.get(
            "resourceVersion"
        ):
            raise _StaleCopyError

    def _pass(self, key: MachineKey) -> Outcome:
        obj = self._store.get_machine(key.namespace, key.name)
        if obj is None:
            self._book.drop(f"{key.namespace}/{key.name}")
            return DONE
        meta = obj.get("metadata") or {}
        if (obj.get("spec") or {}).get("host") != self._host:
            # Another host's machine, or one not bound yet (placement records spec.host, also
            # for a pin by label): the label does not decide, since anyone may edit it. One
            # that a migration moved away is no longer counted here.
            self._book.drop(f"{key.namespace}/{key.name}")
            return DONE
        if migrating_away(obj, self._host):
            # A LibvirtMigration moves it (docs/migration.md): its passes here would see the
            # domain leave and build it again, so the migration's steps alone act on it until
            # the machine names its new host.
            return DONE
        elsewhere = created_on(obj.get("status"))
        if elsewhere is not None and elsewhere != self._host:
            return self._moved(obj, self._inputs.domain_name(obj), elsewhere)
        if meta.get("deletionTimestamp"):
            # From the object's identity and recorded facts only: any object the API server
            # accepted can be deleted, even one the models refuse.
            if c.FINALIZER in (meta.get("finalizers") or []):
                self._fresh(obj)
            return self._delete(obj, self._inputs.domain_name(obj))
        try:
            machine = LibvirtMachine.model_validate(obj)
        except ValidationError as err:
            message = validation_message("LibvirtMachine", err)
            self._store.event(obj, reason=c.REASON_INVALID_SPEC, message=message, warning=True)
            return DONE
        if c.FINALIZER not in (meta.get("finalizers") or []):
            self._set_finalizers(obj, [*(meta.get("finalizers") or []), c.FINALIZER])
            return AGAIN
        domain_name = self._inputs.domain_name(obj)
        vm: Obj | None = None
        try:
            linked = self._inputs.linked_vm(obj, machine)
            vm = linked.vm
            if vm is None:
                link = linked.link
                reason = link.reason or c.REASON_NOT_LINKED
                report = self._failed(obj, None, reason, link.message or "not linked")
                outcome = DONE
            else:
                report, outcome = self._converge(obj, machine, vm, domain_name)
        except ProviderError as err:
            report, outcome = self._failed(obj, vm, *self._problem(obj, err)), RETRY
        self._write_status(obj, domain_name, report)
        if outcome is not RETRY:
            self._failing_since.pop(machine.metadata.uid, None)
        return outcome

    # -- the normal path ---------------------------------------------------------------------

    def _converge(
        self, obj: Obj, machine: LibvirtMachine, vm: Obj, domain_name: str
    ) -> tuple[Report, Outcome]:
        try:
            existing = self._hv.lookup(uuid=machine.metadata.uid, name=domain_name)
        except ForeignDomainError as err:
            return self._failed(obj, vm, c.REASON_FOREIGN_DOMAIN, str(err)), DONE
        intent = power_intent(vm)
        # The definition is read before resolving, so NICs keep the MACs they have (naming) and a
        # seed its digest's form (resolve.machine), and handed to the update, which compares it
        # with the plan.
        current = (
            self._hv.domain_xml(existing.uuid, inactive=True) if existing is not None else None
        )
        public = wants_public_address(vm)
        for attempt in range(2):
            resolution = self._inputs.resolve(
                obj,
                machine,
                vm,
                domain_name=domain_name,
                existing_macs=interface_macs(current) if current is not None else frozenset(),
                existing_seed_digest=(
                    owned_fields(current).ownership.cloud_init_digest
                    if current is not None
                    else None
                ),
                public_addresses=(
                    held_addresses(self._claims.held(machine.metadata.uid)) if public else None
                ),
                existing_volumes=frozenset(pool_volumes(current) if current is not None else ()),
            )
            plan = resolution.machine
            if plan is None or all(p.address is not None for p in plan.public_addresses):
                break
            if attempt:
                raise RetryableError("the public addresses just claimed are not listed yet")
            # Claimed for a machine that exists now, with its finalizer: its deletion releases.
            self._fresh(obj)
            exhausted = self._claims.claim(obj, plan)
            if exhausted is not None:
                report = self._failed(obj, vm, c.REASON_ADDRESS_POOL_EXHAUSTED, exhausted.message())
                waiting = Outcome(requeue_after=c.ADDRESS_POOL_POLL_SECONDS)
                if existing is None:
                    return report, waiting
                state = observed_power_state(self._hv.status(existing.uuid))
                return Report(
                    report.readiness, domain_uuid=existing.uuid, power_state=state
                ), waiting
        if resolution.machine is None:
            reason = resolution.problems[0].reason
            report = self._failed(obj, vm, reason, resolution.message())
            # Catalog objects are watched and wake the machine when they change; Secrets and
            # RBAC are not, so a problem with them is looked at again, with backoff.
            outcome = RETRY if reason in _UNWATCHED_INPUTS else DONE
            disks = infeasible_disks(
                _status_disks(obj),
                [(p.field, p.message) for p in resolution.problems],
                vm.get("spec") or {},
            )
            if existing is None:
                return Report(report.readiness, disks=disks), outcome
            if current is not None:
                # Still running what it was built with: the host counts it (after a restart, the
                # book would otherwise admit newcomers into the room this domain takes).
                self._book.hold(_key(machine), definition_demand(current))
            state = observed_power_state(self._hv.status(existing.uuid))
            return Report(
                report.readiness, domain_uuid=existing.uuid, power_state=state, disks=disks
            ), outcome
        plan = resolution.machine
        key = _key(machine)
        since = preempted_at(obj)
        if since is not None:
            return self._preempted(obj, plan, existing.uuid if existing else None, since)
        hold = restore_hold(obj)
        if hold is not None and existing is not None:
            return self._held_for_restore(obj, plan, existing.uuid, hold)
        if existing is None:
            refused = self._admission(key, machine, vm, plan)
            if refused is not None:
                message, transient = refused.message, refused.transient
                if refused.preempted_first:
                    # Counted on this host by placement meanwhile; no Warning: it passes.
                    return Report(failed(c.REASON_WAITING_FOR_PREEMPTION, message)), CONVERGING
                if transient:
                    # The daemon's first seconds: no Warning, looked at again shortly.
                    return Report(failed(c.REASON_NOT_ADMITTED, message)), CONVERGING
                # Looked at again with backoff, and at once when the host's spec changes or
                # capacity is freed (the host unit wakes the refused machines).
                return self._failed(obj, vm, c.REASON_NOT_ADMITTED, message), RETRY
            return self._create(obj, vm, plan, intent)
        self._book.record(key, demand_of(plan))
        try:
            return self._bring_up_to_date(obj, plan, intent, existing.uuid, current=current)
        except ProviderError as err:
            report = self._failed(obj, vm, *self._problem(obj, err))
            return Report(report.readiness, domain_uuid=existing.uuid), RETRY

    def _preempted(
        self, obj: Obj, plan: ResolvedMachine, uuid: str | None, since: str
    ) -> tuple[Report, Outcome]:
        """A spot machine placement preempted: shut down gracefully (powered off once the grace
        passes), kept off with its disks until placement ends the preemption, and counted on
        this host only while it still runs. No libvirt autostart meanwhile: a host that reboots
        must not start it behind placement's back."""
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        who = ((obj.get("status") or {}).get("preemption") or {}).get("preemptedFor")
        message = (
            f"preempted at {since}{f' to make room for {who}' if who else ''}: a spot machine "
            f"runs on capacity others may reclaim; it keeps its disks and host {self._host}, "
            "and starts again by itself once the host has room, in the order machines were "
            "preempted there"
        )
        readiness = failed(vmapi.REASON_PREEMPTED, message)
        if uuid is None:
            self._book.drop(key)
            return Report(readiness), DONE
        self._hv.set_autostart(uuid, False)
        status = self._hv.status(uuid)
        if status.state is DomainState.SHUTOFF:
            # Off already (a suspended machine's saved memory is kept: it resumes later).
            self._book.drop(key)
            report = Report(
                readiness,
                domain_uuid=uuid,
                power_state=observed_power_state(status),
                retained=retained_record(plan),
            )
            return report, DONE
        graced = plan.model_copy(update={"shutdown_timeout_seconds": self._preemption_grace})
        power = self._power.drive(
            obj, graced, desired=vmapi.POWERED_OFF, mode=vmapi.POWER_OFF_TRY_SOFT, status=status
        )
        if power.settled:
            self._book.drop(key)
        else:
            self._book.record(key, demand_of(plan), leaving=True)
        report = Report(
            readiness,
            domain_uuid=uuid,
            power_state=power.power_state,
            shutdown_requested_at=power.shutdown_requested_at,
            retained=retained_record(plan),
        )
        return report, DONE if power.settled else CONVERGING

    def _held_for_restore(
        self, obj: Obj, plan: ResolvedMachine, uuid: str, hold: RestoreHold
    ) -> tuple[Report, Outcome]:
        """A LibvirtRestore holds the machine: powered off through the same path as any power
        change (gracefully within its shutdown timeout, then forced), kept off, its disks left
        alone, and `held` said once it is off, so the restore may replace them. A saved memory
        image would not match the restored disks: it is discarded."""
        message = (
            f"held off by {c.RESTORE_KIND} {hold.restore} since {hold.since}: its disks are being "
            "restored from a snapshot; it then returns to what its VirtualMachine asks"
        )
        readiness = failed(c.REASON_HELD_FOR_RESTORE, message)
        status = self._hv.status(uuid)
        if status.state is DomainState.SHUTOFF:
            if status.has_managed_save:
                self._hv.discard_saved_state(uuid)
                status = self._hv.status(uuid)
            report = Report(
                readiness,
                domain_uuid=uuid,
                power_state=observed_power_state(status),
                retained=retained_record(plan),
                restore_held=True,
            )
            return report, DONE
        power = self._power.drive(
            obj, plan, desired=vmapi.POWERED_OFF, mode=vmapi.POWER_OFF_TRY_SOFT, status=status
        )
        report = Report(
            readiness,
            domain_uuid=uuid,
            power_state=power.power_state,
            shutdown_requested_at=power.shutdown_requested_at,
            retained=retained_record(plan),
        )
        return report, CONVERGING

    def _admission(
        self, key: str, machine: LibvirtMachine, vm: Obj, plan: ResolvedMachine
    ) -> Refusal | None:
        """None when the host admits the machine (booked from now on), else why not and whether
        that passes by itself within seconds (the daemon is starting)."""
        uncounted = self._uncounted()
        if uncounted:
            return Refusal(
                f"host {self._host} is counting the machines it runs (after a start, "
                f"{uncounted} not yet); the machine is admitted once they are counted",
                transient=True,
            )
        spec = VirtualMachineSpec.model_validate(vm.get("spec") or {})
        request, demand = request_of(machine, spec), demand_of(plan)
        refused = self._book.admit(key, request, demand)
        if refused is None or refused.transient or not self._book.leaving(self._preempted_here()):
            return refused
        # Placement preempted machines here that their own passes have not seen yet (this one
        # may well be what they were preempted for): judged again with them leaving.
        return self._book.admit(key, request, demand)

    def _preempted_here(self) -> list[str]:
        """The machines with a domain here whose copy shows them preempted."""
        found = []
        for built in self._built():
            obj = self._store.get_machine(built.namespace, built.name)
            if obj is not None and preempted_at(obj) is not None:
                found.append(f"{built.namespace}/{built.name}")
        return found

    def _uncounted(self) -> int:
        """How many machines of this host that have a domain have not been passed since the
        daemon started (each is booked by its first pass)."""
        if self._counting_ends is None:
            return 0
        missing = [k for k in self._built() if f"{k.namespace}/{k.name}" not in self._passed]
        if missing and self._clock() < self._counting_ends:
            return len(missing)
        if missing:
            log.warning(
                "host %s admits machines without having counted %s (listed with a domain at "
                "the start, not seen since)",
                self._host,
                ", ".join(f"{k.namespace}/{k.name}" for k in missing[:10]),
            )
        self._counting_ends = None
        return 0

    def _create(
        self, obj: Obj, vm: Obj, plan: ResolvedMachine, intent: PowerIntent
    ) -> tuple[Report, Outcome]:
        wait = self._creation.image_wait(plan)
        if wait is not None and wait.failed:
            return self._failed(obj, vm, c.REASON_IMAGE_IMPORT_FAILED, wait.message), RETRY
        if wait is not None:
            readiness = Readiness(
                ready=False,
                reason=c.REASON_IMPORTING_IMAGE,
                message=wait.message,
                up_to_date=False,
                up_to_date_reason=c.REASON_IMPORTING_IMAGE,
                up_to_date_message="the machine is created once its image is imported",
            )
            return Report(readiness, retained=retained_record(plan)), CONVERGING
        # Before the domain first starts, so its first DHCP request meets the reservation.
        self._reservations.ensure(plan)
        stale = self._reservations.stale_lease(plan, self._clock().timestamp())
        if stale is not None:
            message, left = stale
            readiness = Readiness(
                ready=False,
                reason=c.REASON_ADDRESS_STILL_LEASED,
                message=message,
                up_to_date=False,
                up_to_date_reason=c.REASON_ADDRESS_STILL_LEASED,
                up_to_date_message="the machine is created once its public address is free",
            )
            waiting = Outcome(requeue_after=min(left + 1.0, c.ADDRESS_POOL_POLL_SECONDS))
            return Report(readiness, retained=retained_record(plan)), waiting
        self._fresh(obj)
        uuid = self._creation.create(obj, plan, intent.desired)
        # Its volumes exist now: the pools' free space shows them from the host's next inventory
        # (placement counts a machine's volumes the same way, until it has a providerID).
        meta = obj.get("metadata") or {}
        self._book.record(f"{meta.get('namespace')}/{meta.get('name')}", demand_of(plan))
        # Assessed in the same pass, as any existing domain is: a machine that is already where
        # it should be (an instant start, a machine created powered off) is reported so at once,
        # saving a status write here and its copy on the VM.
        return self._bring_up_to_date(obj, plan, intent, uuid)

    def _bring_up_to_date(
        self,
        obj: Obj,
        plan: ResolvedMachine,
        intent: PowerIntent,
        uuid: str,
        *,
        current: str | None = None,
    ) -> tuple[Report, Outcome]:
        # Updating the definition, live changes and disk growth leave the power state as it is:
        # one read serves them and the power decision.
        status = self._hv.status(uuid)
        self._reservations.ensure(plan)
        update = self._updater.update(obj, uuid, plan, status, current=current)
        self._hv.set_autostart(uuid, plan.autostart)
        power = self._power.drive(
            obj, plan, desired=intent.desired, mode=intent.mode, status=status
        )
        readiness = assess_readiness(
            desired=intent.desired,
            settled=power.settled,
            problem=power.problem,
            power_state=power.power_state,
            has_addresses=bool(power.addresses),
            waiting_for_image=update.waiting_for_image,
            pending=update.pending,
            network_data=plan.cloud_init is not None and plan.cloud_init.network_config is not None,
            outside_pool=[
                f"interface {p.interface}: {p.address} (LibvirtNetwork {p.network!r})"
                for p in plan.public_addresses
                if not p.in_pool
            ],
        )
        if readiness.up_to_date_reason == c.REASON_ADDRESS_OUTSIDE_POOL:
            self._tell_once(obj, c.REASON_ADDRESS_OUTSIDE_POOL, readiness.up_to_date_message)
        report = Report(
            readiness,
            domain_uuid=uuid,
            power_state=power.power_state,
            addresses=power.addresses,
            guest=power.guest,
            pending=update.pending,
            shutdown_requested_at=power.shutdown_requested_at,
            retained=retained_record(plan),
            disks=applied_disks(
                _status_disks(obj),
                [(d.disk, d.volume_attributes_class) for d in plan.disk_classes],
                update.limits_pending,
            ),
        )
        if not power.settled:
            return report, CONVERGING
        if power.address_poll is not None:
            return report, Outcome(requeue_after=power.address_poll)
        return report, DONE

    def _moved(self, obj: Obj, domain_name: str, host: str) -> Outcome:
        """The machine's domain was created on `host`, but its spec.host names this one.

        spec.host is immutable once set, so only a machine bound before its spec.host was
        recorded (its label moved meanwhile) gets here: building it again on this host would run
        a second domain with the same UUID and MACs, and deleting it here would leave the first
        behind, so it is refused.
        """
        message = (
            f"this machine's domain runs on host {host!r}, but its spec.host names "
            f"{self._host!r}; a machine never moves (to delete it, remove its domain on "
            f"{host!r}, then the finalizer)"
        )
        report = self._failed(obj, None, c.REASON_HOST_CHANGED, message)
        status = obj.get("status") or {}
        uuid = (status.get("providerMetadata") or {}).get("domainUUID")
        self._write_status(
            obj,
            domain_name,
            Report(report.readiness, domain_uuid=uuid, power_state=status.get("powerState")),
            host=host,
        )
        return DONE

    def release(self, namespace: str, name: str) -> None:
        """A migration moved the machine away: this host no longer counts it (its passes here
        end before booking once its spec.host names the other host)."""
        self._book.drop(f"{namespace}/{name}")

    # -- a migration's target ---------------------------------------------------------------

    def prepare_incoming(self, obj: Obj) -> Incoming:
        """For a LibvirtMigration moving `obj` here: its volumes made on this host as its own
        creation would make them (the base image by its usual import, overlays over it, blank
        data disks, the cloud-init medium), without a domain; or why not yet, or why not."""
        try:
            machine = LibvirtMachine.model_validate(obj)
        except ValidationError as err:
            return Incoming(
                problem=(c.REASON_INVALID_SPEC, validation_message("LibvirtMachine", err))
            )
        linked = self._inputs.linked_vm(obj, machine)
        if linked.vm is None:
            return Incoming(
                problem=(linked.link.reason or c.REASON_NOT_LINKED, linked.link.message or "")
            )
        # Resolved as if bound here already: the resolver checks the machine's host.
        here = {**obj, "spec": {**(obj.get("spec") or {}), "host": self._host}}
        moved = machine.model_copy(
            update={"spec": machine.spec.model_copy(update={"host": self._host})}
        )
        resolution = self._inputs.resolve(
            here, moved, linked.vm, domain_name=self._inputs.domain_name(obj)
        )
        plan = resolution.machine
        if plan is None:
            return Incoming(problem=(resolution.problems[0].reason, resolution.message()))
        if plan.public_addresses:
            return Incoming(
                problem=(
                    c.MIGRATION_REASON_TARGET_UNSUITABLE,
                    "a machine with a public address is not migrated yet",
                )
            )
        wait = self._creation.image_wait(plan)
        if wait is not None:
            if wait.failed:
                return Incoming(problem=(c.REASON_IMAGE_IMPORT_FAILED, wait.message))
            return Incoming(waiting=wait.message)
        made = self._creation.prepare(plan)
        volumes = []
        for pool, name in made:
            info = self._hv.find_volume(pool, name)
            if info is None:
                raise RetryableError(f"volume {pool}/{name} is not listed yet")
            volumes.append((pool, name, info.path))
        return Incoming(volumes=volumes)

    # -- deletion ----------------------------------------------------------------------------

    def _delete(self, obj: Obj, domain_name: str) -> Outcome:
        meta = obj.get("metadata") or {}
        if c.FINALIZER not in (meta.get("finalizers") or []):
            return DONE
        uuid = str(meta.get("uid"))
        try:
            keep = self._inputs.volumes_to_keep(obj)
            self._teardown.run(obj, uuid=uuid, domain_name=domain_name, keep=keep)
            # After the domain is gone, so no guest uses an address that is free again.
            claims = self._claims.held(uuid)
            self._reservations.release(claims)
            self._claims.release(obj, claims)
        except ProviderError as err:
            message = f"cleanup failed, keeping the finalizer: {err}"
            self._store.event(obj, reason=c.EVENT_CLEANUP_FAILED, message=message, warning=True)
            report = self._failed(obj, None, self._problem(obj, err)[0], message)
            self._write_status(obj, domain_name, report)
            return RETRY
        self._power.forget(uuid)
        self._failing_since.pop(uuid, None)
        self._book.drop(f"{meta.get('namespace')}/{meta.get('name')}")
        remaining = [f for f in meta.get("finalizers") or [] if f != c.FINALIZER]
        try:
            self._store.set_finalizers(obj, remaining)
        except (StateConflictError, NotFoundError):
            return AGAIN
        return DONE

    # -- reporting ---------------------------------------------------------------------------

    def _problem(self, obj: Obj, err: ProviderError) -> tuple[str, str]:
        """The condition for a failed step (see `problem_reason`): the machine's failures are
        timed from the first of a run of failed passes, in memory (a restart starts again)."""
        if isinstance(err, HostUnreachableError):
            # Not the machine's failure, and not terminal: the host comes back (or an admin
            # fixes its credentials), and the machine is never rebuilt elsewhere meanwhile.
            return c.REASON_HOST_UNREACHABLE, (
                f"host {err.host} is not reachable ({err.reason}): {err.detail}; the machine is "
                "kept there and reconciled once the host is connected again"
            )
        uid = str((obj.get("metadata") or {}).get("uid"))
        now = self._clock()
        since = self._failing_since.setdefault(uid, now)
        retryable = isinstance(err, RetryableError)
        reason = problem_reason(retryable=retryable, failing_for=now - since)
        message = f"libvirt failed (retrying with backoff): {err}" if retryable else str(err)
        return reason, message

    def _tell_once(self, obj: Obj, reason: str, message: str) -> None:
        """A Warning Event for a condition the machine's UpToDate does not show yet."""
        before = find_condition(
            (obj.get("status") or {}).get("conditions"), vmapi.CONDITION_UP_TO_DATE
        )
        if before is None or before.get("reason") != reason or before.get("message") != message:
            self._store.event(obj, reason=reason, message=message, warning=True)

    def _set_finalizers(self, obj: Obj, finalizers: list[str], *, host: str | None = None) -> None:
        # A conflict means the object changed meanwhile; the next pass reads it again.
        with contextlib.suppress(StateConflictError, NotFoundError):
            self._store.set_finalizers(obj, finalizers, host=host)

    def _failed(self, obj: Obj, vm: Obj | None, reason: str, message: str) -> Report:
        """A problem: both conditions False with `reason`, and a Warning Event (on the machine
        and on its linked VM) when it is new."""
        RECONCILE_ERRORS.labels(reason=reason).inc()
        before = find_condition(
            (obj.get("status") or {}).get("conditions"), vmapi.CONDITION_INFRASTRUCTURE_READY
        )
        if before is None or before.get("reason") != reason or before.get("message") != message:
            self._store.event(obj, reason=reason, message=message, warning=True)
            if vm is not None:
                self._store.event(vm, reason=reason, message=message, warning=True)
        return Report(failed(reason, message))

    def _write_status(
        self, obj: Obj, domain_name: str, report: Report, *, host: str | None = None
    ) -> None:
        current = obj.get("status") or {}
        meta = obj.get("metadata") or {}
        generation = meta.get("generation")
        desired = compute_status(
            current=current,
            power_state=report.power_state,
            host=host or self._host,
            domain_uuid=report.domain_uuid,
            domain_name=domain_name,
            addresses=report.addresses,
            guest=report.guest,
            readiness=report.readiness,
            generation=generation if isinstance(generation, int) else None,
            pending_changes=report.pending,
            now=format_time(self._clock()),
            shutdown_requested_at=format_time(report.shutdown_requested_at)
            if report.shutdown_requested_at is not None
            else None,
            retained_volumes=report.retained,
            disks=report.disks,
            restore_held=report.restore_held,
        )
        patch = merge_patch(current, desired)
        if patch:
            self._store.patch_machine_status(
                str(meta.get("namespace")), str(meta.get("name")), patch
            )
