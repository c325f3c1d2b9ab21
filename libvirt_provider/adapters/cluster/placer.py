"""Placement of machines created without a host, by the elected daemon only.

One decision, made once: only the daemon holding the generic controller's Lease runs a placer,
and a binding is written with the machine's resourceVersion, so two placers (a term ending while
the next begins) cannot both bind one machine: the second write is refused. The binding sets
`spec.host` (immutable from then on) and the host label derived from it, in one patch; the
label is what the host's daemon watches.

The placer reads only watch-fed copies (every LibvirtMachine, every VirtualMachine, every
LibvirtHost, the catalog) plus one LIST of the heartbeat Leases every few seconds. It also keeps
the label of a machine a user pinned with `spec.host` alone, and reports machines whose host
stopped its heartbeat (`HostNotReady`); it never moves a machine.

A machine that is not spot and fits no host may take the room of spot machines on one host
(`hosts/preemption.py`): they are marked preempted (`status.preemption`, which their host's daemon
acts on: it shuts them down and keeps them off) before the machine is bound, and their room is
the machine's from that decision on, so a burst preempts only what it needs. A preempted machine
is started again by unmarking it once its host has room, in the order they were preempted.

This is the shell: it reads, asks the pure core in `libvirt_provider/hosts/`, binds and reports.
The host view (`view`), the heartbeat rules (`heartbeat`), what a machine asks (`machines`),
the pass's ledger with the assumed bindings (`survey`, `assumed`), the decision (`placement`,
`fit`) and what is said on a machine (`report`) are decided there.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client

from generic import constants as vmapi
from generic.adapters.informer import RELISTED, ClusterInformer, lean_slim, slim, without_status
from generic.adapters.kubeclient import (
    API_ERRORS,
    REQUEST_TIMEOUT,
    ApiFailure,
    KubeApi,
    failure_of,
    lean_decoder,
)
from generic.background import BackgroundLoop
from generic.formats import format_time, parse_micro_time
from libvirt_provider import constants as c
from libvirt_provider.adapters.kube.adapter import KEPT, KubeAdapter
from libvirt_provider.faults import crash_point
from libvirt_provider.hosts import heartbeat, machines
from libvirt_provider.hosts.assumed import Assumed, Demands
from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.hosts.placement import Decision, HostView, Ledger, decide
from libvirt_provider.hosts.preemption import Preemption, choose, restarts
from libvirt_provider.hosts.report import (
    Report,
    Reported,
    conditions_patch,
    placed_events,
    startup_grace,
    unplaced_report,
)
from libvirt_provider.hosts.survey import survey
from libvirt_provider.hosts.view import host_views
from libvirt_provider.hosts.waiting import Waiting, capacity_state
from libvirt_provider.machine.catalog import CatalogReader
from libvirt_provider.machine.linkage import check_link

__all__ = ["Placer"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# While machines wait, the placer looks again this often even when nothing wakes it (a catalog
# change does not wake it).
WAITING_PASS_SECONDS = 10.0
# Concurrent binding writes.
BINDERS = 4
# How long a preemption (or its end) this placer wrote is remembered while the copies do not show
# it yet, as assumed bindings are.
PREEMPTION_ECHO_SECONDS = 60.0
# How long a machine may be one-sided before it is told so (the generic controller writes the two
# halves of a link one after the other).
LINK_GRACE_SECONDS = 5.0


def _where(meta: Mapping[str, Any]) -> tuple[str, str, str, str, str]:
    """A LibvirtMachine's address, as the custom objects API takes it."""
    return c.GROUP, c.VERSION, meta["namespace"], c.MACHINE_PLURAL, meta["name"]


class Placer:
    """Places unplaced LibvirtMachines on LibvirtHosts, on a thread of its own."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        store: KubeAdapter,
        lease_namespace: str,
        heartbeat_grace: float = c.HEARTBEAT_GRACE_SECONDS,
    ) -> None:
        self._custom = self._leases = KubeApi(api)
        self._store = store
        self._namespace = lease_namespace
        self._catalog = CatalogReader(store)
        self._waiting = False
        # Decided and being (or just) bound; written by the binding threads too.
        self._assumed = Assumed()
        # Bindings are API writes (tens of ms, far more on a busy API server): they run beside
        # the decisions, as kube-scheduler's binding cycle does, so one slow write never holds up
        # the next decision; the decisions themselves stay one at a time.
        self._binder = ThreadPoolExecutor(max_workers=BINDERS, thread_name_prefix="binder")
        self._beats: tuple[float, dict[str, dt.datetime]] | None = None
        self._started = time.monotonic()
        self._grace = heartbeat_grace
        self._startup_grace = startup_grace(heartbeat.heartbeat_interval(heartbeat_grace))
        # Set while a machine's report waits for the term's startup grace: the next pass then
        # comes as that grace ends, not a whole waiting pass later.
        self._deferred = False
        self._answered = heartbeat.Answered(self._started, heartbeat_grace)
        self._demands = Demands()
        self._reported = Reported()
        self._waiting_for = Waiting(self._started)
        # Reports (a status patch, an Event) are written here, one at a time, so a pile of them
        # never holds up the decisions; a report is written only when its reason or message
        # changes (`Reported`), so the queue stays short.
        self._reporter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reporter")
        # Machines whose report could not be written, handed back to the placer's thread (the
        # only one that touches `_reported` and `_waiting_for`) to be said again.
        self._unreported: queue.SimpleQueue[str] = queue.SimpleQueue()
        # Preemptions written (when, as written; and when, monotonic) and ends of preemption,
        # until the copies show them: only the placer's thread touches these.
        self._preempting: dict[str, tuple[str, float]] = {}
        self._restarting: dict[str, float] = {}
        self._loop = BackgroundLoop("placer", self._run)

        def informer(
            group: str,
            plural: str,
            on_change: Any,
            keep: Callable[[Obj], Obj] = slim,
            *,
            tenants: bool = True,
        ) -> ClusterInformer:
            # What tenants write (VMs, machines) is decoded and kept lean: only the labels and
            # annotations read here, whatever they put there (`generic.lean`).
            return ClusterInformer(
                api,
                group=group,
                version=c.VERSION,
                plural=plural,
                on_change=on_change,
                keep=lean_slim(KEPT, keep) if tenants else keep,
                decode=lean_decoder(KEPT) if tenants else None,
            )

        self.machines = informer(c.GROUP, c.MACHINE_PLURAL, self._machine_changed)
        # Of a VM, placement reads the spec only (what the machine asks for): its status, about
        # half of it, would be held for every VM of the cluster for nothing.
        self.vms = informer(vmapi.GROUP, vmapi.PLURAL, self._vm_changed, keep=without_status)
        # Hosts are the admin's, and placement reads their labels (selectors, zones).
        self.hosts = informer(
            c.GROUP, c.HOST_PLURAL, lambda _t, _o: self._loop.wake(), tenants=False
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._started = time.monotonic()
        self._answered.broken(self._started)
        for informer in (self.machines, self.vms, self.hosts):
            informer.start()
        self._loop.start()

    def stop(self) -> None:
        for informer in (self.machines, self.vms, self.hosts):
            informer.stop()
        self._loop.stop(REQUEST_TIMEOUT[1] * 2)
        # Bindings under way finish (each is one bounded write); queued ones are dropped, and
        # the next leader decides them again.
        self._binder.shutdown(wait=True, cancel_futures=True)
        self._reporter.shutdown(wait=True, cancel_futures=True)

    def alive(self) -> bool:
        return self._loop.alive()

    def _woken(self, wake: machines.Wake) -> None:
        if wake is machines.Wake.NOW or (wake is machines.Wake.IF_WAITING and self._waiting):
            self._loop.wake()

    def _vm_changed(self, kind: str, _obj: Obj | None) -> None:
        self._woken(machines.Wake.NOW if kind == RELISTED else machines.vm_event_wakes(kind))

    def _machine_changed(self, kind: str, obj: Obj | None) -> None:
        relisted = kind == RELISTED
        self._woken(machines.Wake.NOW if relisted else machines.machine_event_wakes(kind, obj))

    def _run(self, loop: BackgroundLoop) -> None:
        for informer in (self.machines, self.vms, self.hosts):
            while not loop.stopping and not informer.wait_synced(1.0):
                pass
        while not loop.stopping:
            try:
                self._waiting = self.place_all()
            except API_ERRORS as err:
                log.warning("placement pass failed: %s; trying again", err)
                # No host could renew its heartbeat meanwhile either (`hosts/heartbeat.py`).
                self._answered.broken(time.monotonic())
                self._waiting = True
            except Exception:  # a bug must not end placement for good
                log.exception("placement pass failed")
                self._waiting = True
            # Otherwise every half grace: a heartbeat that turned stale changes nothing in the
            # copies, and a host that stopped must be reported in time (one LIST of the Leases
            # per pass).
            wait = WAITING_PASS_SECONDS if self._waiting else self._grace / 2
            if self._deferred:
                wait = min(wait, self._started + self._startup_grace - time.monotonic())
            loop.wait(max(0.0, wait))

    # -- one pass ----------------------------------------------------------------------------

    def place_all(self) -> bool:
        """One pass over every machine; True while some machine still waits for a host."""
        objs = self.machines.items() or []
        now = time.monotonic()
        views = self._views()
        catalog = self._catalog.catalog()
        pools = machines.per_host_pools(catalog)
        self._forget_echoed(objs, now)
        self._deferred = False
        found = survey(
            objs,
            views,
            {str(o["metadata"]["name"]) for o in self.hosts.items() or []},
            assumed=self._assumed,
            demand=lambda obj, host: self._demand(obj, host, catalog, pools),
            answered=self._answered.for_a_grace(now),
            now=now,
            wall=dt.datetime.now(dt.UTC),
            preempting={key: at for key, (at, _) in self._preempting.items()},
            restarting=set(self._restarting),
            grace=self._grace,
        )
        for fix in found.fixes:
            if fix.record is not None:
                self._keep_host(fix.obj, fix.record)
            if fix.stranded is not None:  # said so, never moved
                self._say(fix.obj, vmapi.STATUS_UNKNOWN, fix.stranded)
        waiting = False
        decided = 0
        self._waiting_for.full_pass(now)
        while not self._unreported.empty():
            key = self._unreported.get_nowait()
            self._reported.forget(key)
            self._waiting_for.forget(key)
        capacity = capacity_state(views, found.ledger)
        # Machines not judged yet (new ones) first: a machine that fits is not held up by those
        # that were just looked at again.
        fresh = sorted(
            found.unplaced,
            key=lambda o: machines.key_of(o) in self._waiting_for,
        )
        for obj in fresh:
            key = machines.key_of(obj)
            if key in self._assumed:
                continue
            vm = self._linked_vm(obj)
            # Not the machine's resourceVersion: its own status (the report) changes that.
            judged = (
                capacity,
                obj["metadata"].get("generation"),
                machines.linked_vm_key(obj),
                (vm or {}).get("metadata", {}).get("resourceVersion"),
            )
            if self._waiting_for.unchanged(key, judged):
                waiting = True
                continue
            placed = self._place(obj, views, found.ledger, catalog, pools)
            if placed:
                self._waiting_for.forget(key)
                decided += 1
                continue
            if placed is not None:
                self._waiting_for.remember(key, judged)
            waiting = True
        if found.preempted:
            started = set(restarts(found.preempted, views, found.ledger, found.refused))
            for entry in found.preempted:
                if entry.key in started:
                    self._restart(entry.key, entry.host, now)
            waiting = waiting or len(started) < len(found.preempted)
        if decided:
            log.debug(
                "placement pass: %d of %d unplaced machines decided in %.0f ms",
                decided,
                len(found.unplaced),
                (time.monotonic() - now) * 1000,
            )
        live = {machines.key_of(m) for m in objs}
        self._reported.keep_only(live)
        self._waiting_for.keep_only(live)
        self._demands.keep_only(live)
        return waiting

    def _views(self) -> list[HostView]:
        hosts = self.hosts.items() or []
        names = {str(obj["metadata"]["name"]) for obj in hosts}
        listed_at, beats = self._beats if self._beats is not None else (None, {})
        if heartbeat.list_again(listed_at, beats.keys(), names, time.monotonic()):
            leases = self._leases.list_namespaced_lease(
                self._namespace, label_selector=c.HOST_LABEL, _request_timeout=REQUEST_TIMEOUT
            )
            beats = heartbeat.renewals(
                (
                    (lease.get("metadata") or {}).get("labels"),
                    parse_micro_time((lease.get("spec") or {}).get("renewTime")),
                )
                for lease in leases.get("items") or []
            )
            self._beats = (time.monotonic(), beats)
        return host_views(hosts, beats, dt.datetime.now(dt.UTC), self._grace)

    def _demand(
        self, obj: Obj, host: HostView | None, catalog: Any, pools: frozenset[str]
    ) -> Demand:
        """What a placed machine takes on its host (`machines.demand_on`)."""
        vm = self._linked_vm(obj)
        if vm is None or host is None:
            return Demand()

        def work() -> Demand:
            return machines.demand_on(machines.ask(obj, vm, catalog, pools), host)

        return self._demands.of(machines.key_of(obj), obj, vm, host.name, work)

    def _linked_vm(self, obj: Obj) -> Obj | None:
        key = machines.linked_vm_key(obj)
        return self.vms.get(key) if key else None

    # -- placing one machine -----------------------------------------------------------------

    def _place(
        self,
        obj: Obj,
        views: list[HostView],
        ledger: Ledger,
        catalog: Any,
        per_host_pools: frozenset[str],
    ) -> bool | None:
        """True when the machine was bound (or needs nothing from placement), None when it is to
        be looked at again on the next pass whatever changes."""
        vm = self._linked_vm(obj)
        link = check_link(obj, vm)
        if not link.linked:
            # The generic controller links a machine it creates within moments (the VM's arrival
            # wakes us); one that stays one-sided is said so, as its daemon did before placement.
            wall = dt.datetime.now(dt.UTC)
            if not machines.older_than(obj, LINK_GRACE_SECONDS, now=wall):
                return None
            said = Report(link.reason or c.REASON_NOT_LINKED, link.message or "")
            self._say(obj, vmapi.STATUS_FALSE, said, once=True)
            return False
        assert vm is not None
        asked = machines.ask(obj, vm, catalog, per_host_pools)
        if isinstance(asked, Report):
            self._say(obj, vmapi.STATUS_FALSE, asked, once=True)
            return False
        decision = decide(asked.request, views, asked.fit, ledger)
        if decision.host is None:
            preemption = choose(asked.request, views, asked.fit, ledger)
            if preemption is not None:
                if not self._preempt(obj, preemption, ledger):
                    return None  # a mark not written: decided again on the next pass
                decision = Decision(preemption.host, preemption.demand)
        if decision.host is None:
            age = time.monotonic() - self._started
            report = unplaced_report(
                asked.fit.problems, decision, term_age=age, grace=self._startup_grace
            )
            if report is None:  # too early in the term to say: looked at again
                self._deferred = True
                return None
            self._say(obj, vmapi.STATUS_FALSE, report, once=True)
            return False
        assert decision.demand is not None
        key, group = machines.key_of(obj), machines.spread_group(obj)
        self._assumed.assume(key, decision.host, decision.demand, group, at=time.monotonic())
        ledger.put(key, decision.host, decision.demand, pending=True, group=group)
        self._binder.submit(self._bind_or_forget, obj, decision)
        return True

    # -- preemption ---------------------------------------------------------------------------

    def _forget_echoed(self, objs: list[Obj], now: float) -> None:
        """Forget the preemptions (and their ends) the copies show, or that are too old."""
        marks = {machines.key_of(o): machines.preempted_at(o) for o in objs}
        for key, (_at, since) in list(self._preempting.items()):
            if marks.get(key) is not None or now - since > PREEMPTION_ECHO_SECONDS:
                del self._preempting[key]
        for key, since in list(self._restarting.items()):
            if marks.get(key) is None or now - since > PREEMPTION_ECHO_SECONDS:
                del self._restarting[key]

    def _preempt(self, obj: Obj, preemption: Preemption, ledger: Ledger) -> bool:
        """Mark the victims preempted (each an Event), and take them out of the ledger; False
        when a mark could not be written (the machine is decided again)."""
        key = machines.key_of(obj)
        at = format_time(dt.datetime.now(dt.UTC))
        for victim in preemption.victims:
            namespace, name = victim.split("/", 1)
            try:
                self._store.patch_machine_status(namespace, name, machines.preemption_mark(at, key))
            except Exception as err:
                log.warning("preempting %s for %s failed: %s", victim, key, err)
                return False
            self._preempting[victim] = (at, time.monotonic())
            ledger.drop(victim)
            log.info("preempted %s on %s for %s", victim, preemption.host, key)
            target = self.machines.get(victim)
            if target is not None:
                self._event(
                    target,
                    vmapi.REASON_PREEMPTED,
                    f"preempted to make room for {key}, which is not spot and fits no host: the "
                    "guest is asked to shut down (and powered off after the host's grace "
                    f"period); it keeps its disks and host {preemption.host}, and starts again "
                    "by itself once the host has room, in the order machines were preempted "
                    "there",
                    warning=True,
                )
        self._event(
            obj,
            c.EVENT_PREEMPTING,
            f"fits no host as it is: preempted {len(preemption.victims)} spot machine(s) on "
            f"host {preemption.host} to make room ({', '.join(preemption.victims)})",
            warning=False,
        )
        return True

    def _restart(self, key: str, host: str, now: float) -> None:
        """End a machine's preemption: its host's daemon starts it again."""
        namespace, name = key.split("/", 1)
        try:
            self._store.patch_machine_status(namespace, name, machines.preemption_mark(None))
        except Exception as err:
            log.warning("ending the preemption of %s failed: %s", key, err)
            return
        self._restarting[key] = now
        self._preempting.pop(key, None)
        log.info("%s, preempted, starts again on %s", key, host)
        target = self.machines.get(key)
        if target is not None:
            self._event(
                target,
                c.EVENT_PREEMPTION_ENDED,
                f"host {host} has room again: the machine starts again",
                warning=False,
            )

    def _event(self, obj: Obj, reason: str, message: str, *, warning: bool) -> None:
        """An Event, posted on the reporter thread."""

        def post() -> None:
            try:
                self._store.event(obj, reason=reason, message=message, warning=warning)
            except Exception as err:
                log.info("posting an Event on %s failed: %s", machines.key_of(obj), err)

        self._reporter.submit(post)

    def _bind_or_forget(self, obj: Obj, decision: Decision) -> None:
        """On a binding thread: bind, or forget the assumed placement and look again."""
        try:
            bound = self._bind(obj, decision)
        except Exception as err:  # a failed binding is decided again
            log.warning("binding %s to %s failed: %s", machines.key_of(obj), decision.host, err)
            bound = False
        if not bound:
            self._assumed.forget(machines.key_of(obj))
            self._loop.wake()

    def _bind(self, obj: Obj, decision: Decision) -> bool:
        """True when the machine is bound (or gone)."""
        assert decision.host is not None
        meta = obj["metadata"]
        key = machines.key_of(obj)
        version = str(meta["resourceVersion"])
        for _attempt in range(3):
            try:
                self._patch_machine(meta, machines.binding(decision.host, version))
                break
            except API_ERRORS as err:
                failure = failure_of(err)
                if failure is ApiFailure.NOT_FOUND:
                    return True
                if failure is not ApiFailure.CONFLICT:
                    raise
            then = machines.after_conflict(obj, self._fresh(meta))
            if isinstance(then, bool):
                return then
            version = then
        else:
            return False
        crash_point("place:after-bind")
        self._reported.forget(key)
        log.info("placed %s on host %s", key, decision.host)
        group = machines.spread_group(obj)
        for event in placed_events(
            decision.host, spread_honoured=decision.spread_honoured, group=group
        ):
            self._store.event(
                obj, reason=event.reason, message=event.message, warning=event.warning
            )
        return True

    def _patch_machine(self, meta: Mapping[str, Any], body: Obj) -> None:
        self._custom.patch_namespaced_custom_object(
            *_where(meta), body, _request_timeout=REQUEST_TIMEOUT
        )

    def _fresh(self, meta: Mapping[str, Any]) -> Obj | None:
        """The machine read from the API server; None when it is gone."""
        try:
            found = self._custom.get_namespaced_custom_object(
                *_where(meta), _request_timeout=REQUEST_TIMEOUT
            )
        except API_ERRORS as err:
            if failure_of(err) is ApiFailure.NOT_FOUND:
                return None
            raise
        return found if isinstance(found, dict) else None

    # -- reporting ---------------------------------------------------------------------------

    def _say(self, obj: Obj, status: str, report: Report, *, once: bool = False) -> None:
        """The report in the machine's InfrastructureReady and UpToDate (its VM copies them), and
        a Warning Event (with `once`, only when the reason or message is news for the machine).
        Written on the reporter thread."""
        if once and not self._reported.is_news(
            machines.key_of(obj), f"{report.reason}: {report.message}"
        ):
            return
        self._reporter.submit(self._write_report, obj, status, report)

    def _write_report(self, obj: Obj, status: str, report: Report) -> None:
        meta = obj["metadata"]
        now = format_time(dt.datetime.now(dt.UTC))
        patch = conditions_patch(
            obj.get("status") or {}, meta.get("generation"), status, report, now=now
        )
        if patch:
            try:
                self._store.patch_machine_status(str(meta["namespace"]), str(meta["name"]), patch)
            except Exception as err:
                log.info("reporting on %s failed: %s", machines.key_of(obj), err)
                self._unreported.put(machines.key_of(obj))  # said again on the next look
        try:
            self._store.event(obj, reason=report.reason, message=report.message, warning=True)
        except Exception as err:
            log.info("posting an Event on %s failed: %s", machines.key_of(obj), err)

    def _keep_host(self, obj: Obj, record: machines.HostRecord) -> None:
        """The label follows spec.host; a pin by label alone gets its spec.host recorded (in one
        write conditioned on the copy's resourceVersion, so a label changed meanwhile is read
        again on the next pass rather than recorded)."""
        meta = obj["metadata"]
        body: Obj = (
            machines.binding(record.host, str(meta.get("resourceVersion")))
            if record.record
            else {"metadata": {"labels": {c.HOST_LABEL: record.host}}}
        )
        try:
            self._patch_machine(meta, body)
        except API_ERRORS as err:
            log.info("recording the host of %s failed: %s", machines.key_of(obj), err)
            return
        if record.record:
            log.info(
                "recorded host %s of %s, pinned by its label", record.host, machines.key_of(obj)
            )
        event = machines.host_record_event(record)
        if event is not None:
            log.info("restored the host label of %s to %s", machines.key_of(obj), record.host)
            self._store.event(
                obj, reason=event.reason, message=event.message, warning=event.warning
            )
