"""Placement of machines created without a host, by the elected daemon only.

One decision, made once: only the daemon holding the generic controller's Lease runs a placer,
and a binding is written with the machine's resourceVersion, so two placers (a term ending while
the next begins) cannot both bind one machine: the second write is refused. The binding sets
`spec.host` (immutable from then on) and the host label derived from it, in one patch; the
label is what the host's daemon watches.

The placer reads only watch-fed copies (every LibvirtMachine, every VirtualMachine, every
LibvirtHost, the catalog) plus, when there is something to place, one LIST of the heartbeat
Leases. Its ledger of what is where is rebuilt from the copies on each pass, plus the bindings it
made that the copies do not show yet (kube-scheduler's assumed pods), so a burst of placements
accounts for each other.

It also keeps the label of a machine a user pinned with `spec.host` alone, and reports machines
whose host stopped its heartbeat (`HostNotReady`); it never moves a machine.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from urllib3.exceptions import HTTPError

from generic import constants as vmapi
from generic.adapters.informer import RELISTED, ClusterInformer, slim, without_status
from generic.adapters.kubeclient import REQUEST_TIMEOUT
from generic.api import VirtualMachineSpec
from generic.conditions import DesiredCondition, find_condition, merge_conditions
from generic.formats import format_time, merge_patch, parse_time, validation_details
from libvirt_provider import constants as c
from libvirt_provider.adapters.kube.adapter import KubeAdapter
from libvirt_provider.api import LibvirtMachine, SpreadBy
from libvirt_provider.faults import crash_point
from libvirt_provider.host_api import LibvirtHostSpec
from libvirt_provider.hosts.fit import ResolverFit
from libvirt_provider.hosts.inventory import Demand, allocatable_of_status, parse_size
from libvirt_provider.hosts.placement import Decision, HostView, Ledger, Misfit, Request, decide
from libvirt_provider.machine.catalog import CatalogReader

__all__ = ["Placer"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# Bindings the copies do not show yet are forgotten after this long (the watch lost them: the
# next relist shows the truth).
ASSUMED_SECONDS = 60.0
# While machines wait, the placer looks again this often even when nothing wakes it (a catalog
# change does not wake it).
WAITING_PASS_SECONDS = 10.0
# How long after a term begins a machine that fits nowhere is only retried, not reported.
STARTUP_GRACE_SECONDS = 15.0
# Concurrent binding writes.
BINDERS = 4
# How long one LIST of the heartbeat Leases serves passes (heartbeats are 10 s apart and judged
# against 40 s: a few seconds of age change nothing).
HEARTBEATS_FRESH_SECONDS = 3.0
# Otherwise this often: a heartbeat that turned stale changes nothing in the copies, and a host
# that stopped must be reported within a reasonable time (one LIST of the Leases per pass).
IDLE_PASS_SECONDS = c.HEARTBEAT_GRACE_SECONDS / 2


@dataclass(frozen=True)
class _Assumed:
    host: str
    demand: Demand
    group: tuple[str, str] | None
    at: float


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _group(obj: Obj) -> tuple[str, str] | None:
    placement = (obj.get("spec") or {}).get("placement") or {}
    group = placement.get("spreadGroup")
    namespace = (obj.get("metadata") or {}).get("namespace")
    return (str(namespace), str(group)) if group else None


class Placer:
    """Places unplaced LibvirtMachines on LibvirtHosts, on a thread of its own."""

    def __init__(self, api: client.ApiClient, *, store: KubeAdapter, lease_namespace: str) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._leases = client.CoordinationV1Api(api)
        self._store = store
        self._namespace = lease_namespace
        self._catalog = CatalogReader(store)
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._waiting = False
        # Decided and being (or just) bound, by machine key; written by the binding threads too.
        self._assumed: dict[str, _Assumed] = {}
        self._lock = threading.Lock()
        # Bindings are API writes (tens of ms, far more on a busy API server): they run beside
        # the decisions, as kube-scheduler's binding cycle does, so one slow write never holds up
        # the next decision; the decisions themselves stay one at a time.
        self._binder = ThreadPoolExecutor(max_workers=BINDERS, thread_name_prefix="binder")
        self._beats: tuple[float, dict[str, dt.datetime]] | None = None
        self._started = time.monotonic()
        # Since when the API server has answered this placer without a break: a heartbeat that
        # is stale only because no host could reach the API server meanwhile (an outage, which
        # also ends the term and starts a new one) is no news about the host.
        self._answered_since = self._started
        # Demand of placed machines, by (LibvirtMachine, VM) resourceVersions and host.
        self._demands: dict[str, tuple[tuple[str, str, str], Demand]] = {}
        # The message last reported on each waiting machine (an Event is posted once per message).
        self._reported: dict[str, str] = {}

        def informer(
            group: str, plural: str, on_change: Any, keep: Callable[[Obj], Obj] = slim
        ) -> ClusterInformer:
            return ClusterInformer(
                api, group=group, version=c.VERSION, plural=plural, on_change=on_change, keep=keep
            )

        self.machines = informer(c.GROUP, c.MACHINE_PLURAL, self._machine_changed)
        # Of a VM, placement reads the spec only (what the machine asks for): its status, about
        # half of it, would be held for every VM of the cluster for nothing.
        self.vms = informer(vmapi.GROUP, vmapi.PLURAL, self._vm_changed, keep=without_status)
        self.hosts = informer(c.GROUP, c.HOST_PLURAL, lambda _t, _o: self._wake.set())
        self._thread = threading.Thread(target=self._run, name="placer", daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._started = self._answered_since = time.monotonic()
        for informer in (self.machines, self.vms, self.hosts):
            informer.start()
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        for informer in (self.machines, self.vms, self.hosts):
            informer.stop()
        if self._thread.is_alive():
            self._thread.join(REQUEST_TIMEOUT[1] * 2)
        # Bindings under way finish (each is one bounded write); queued ones are dropped, and
        # the next leader decides them again.
        self._binder.shutdown(wait=True, cancel_futures=True)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _wake_if_waiting(self) -> None:
        if self._waiting:
            self._wake.set()

    def _vm_changed(self, kind: str, _obj: Obj | None) -> None:
        # A new VM may be what an unplaced machine waits for (its watch and the machines' are
        # separate streams: the machine can arrive first).
        if kind in ("ADDED", RELISTED):
            self._wake.set()
        else:
            self._wake_if_waiting()

    def _machine_changed(self, kind: str, obj: Obj | None) -> None:
        # Machines change all the time (their status); only what can change a placement wakes
        # the placer: a machine without a host, one going away (capacity freed), a relist.
        if kind == RELISTED or obj is None:
            self._wake.set()
            return
        spec, meta = obj.get("spec") or {}, obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        if not spec.get("host") or labels.get(c.HOST_LABEL) != spec.get("host"):
            self._wake.set()
        elif kind == "DELETED" or meta.get("deletionTimestamp"):
            self._wake_if_waiting()

    def _run(self) -> None:
        for informer in (self.machines, self.vms, self.hosts):
            while not self._stopped.is_set() and not informer.wait_synced(1.0):
                pass
        while not self._stopped.is_set():
            self._wake.clear()
            try:
                self._waiting = self.place_all()
            except (ApiException, HTTPError, OSError) as err:
                log.warning("placement pass failed: %s; trying again", err)
                self._answered_since = time.monotonic()
                self._waiting = True
            except Exception:  # a bug must not end placement for good
                log.exception("placement pass failed")
                self._waiting = True
            self._wake.wait(WAITING_PASS_SECONDS if self._waiting else IDLE_PASS_SECONDS)

    # -- one pass ----------------------------------------------------------------------------

    def place_all(self) -> bool:
        """One pass over every machine; True while some machine still waits for a host."""
        machines = self.machines.items() or []
        unplaced = [m for m in machines if self._unplaced(m)]
        now = time.monotonic()
        views = self._views()
        catalog = self._catalog.catalog()
        per_host_pools = frozenset(
            name for sc in catalog.storage_classes.values() for name in sc.spec.host_pools
        )
        by_name = {v.name: v for v in views}
        known = {str(o["metadata"]["name"]) for o in self.hosts.items() or []}
        wall = dt.datetime.now(dt.UTC)
        ledger = Ledger()
        for obj in machines:
            host = self._host_of(obj)
            if host is None:
                continue
            key = _key(obj)
            with self._lock:
                self._assumed.pop(key, None)
            self._keep_label(obj, host)
            self._report_host(obj, host, by_name.get(host), known=host in known, now=wall)
            if not unplaced:
                continue  # the ledger serves decisions only
            status = obj.get("status") or {}
            demand = self._demand(obj, by_name.get(host), catalog, per_host_pools)
            ledger.put(key, host, demand, pending=not status.get("providerID"), group=_group(obj))
        with self._lock:
            assumed_now = list(self._assumed.items())
        for key, assumed in assumed_now:
            if now - assumed.at > ASSUMED_SECONDS:
                with self._lock:
                    self._assumed.pop(key, None)
            elif key not in ledger:
                ledger.put(key, assumed.host, assumed.demand, pending=True, group=assumed.group)
        waiting = False
        decided = 0
        for obj in sorted(unplaced, key=lambda o: str(o["metadata"].get("creationTimestamp"))):
            with self._lock:
                if _key(obj) in self._assumed:
                    continue
            if self._place(obj, views, ledger, catalog, per_host_pools):
                decided += 1
            else:
                waiting = True
        if decided:
            log.debug(
                "placement pass: %d of %d unplaced machines decided in %.0f ms",
                decided,
                len(unplaced),
                (time.monotonic() - now) * 1000,
            )
        live = {_key(m) for m in machines}
        for key in [k for k in self._reported if k not in live]:
            del self._reported[key]
        for key in [k for k in self._demands if k not in live]:
            del self._demands[key]
        return waiting

    @staticmethod
    def _unplaced(obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        return (
            not (obj.get("spec") or {}).get("host")
            and not (meta.get("labels") or {}).get(c.HOST_LABEL)
            and not meta.get("deletionTimestamp")
        )

    @staticmethod
    def _host_of(obj: Obj) -> str | None:
        """The machine's host: spec.host, or (pinned by label, spec.host not yet recorded by its
        daemon) the label."""
        meta = obj.get("metadata") or {}
        host = (obj.get("spec") or {}).get("host") or (meta.get("labels") or {}).get(c.HOST_LABEL)
        return str(host) if host else None

    def _views(self) -> list[HostView]:
        hosts = self.hosts.items() or []
        names = {str(obj["metadata"]["name"]) for obj in hosts}
        beats = self._heartbeats(names)
        now = dt.datetime.now(dt.UTC)
        views = []
        for obj in hosts:
            view = host_view(obj, beats.get(str(obj["metadata"]["name"])), now)
            if view is not None:
                views.append(view)
        return sorted(views, key=lambda v: v.name)

    def _heartbeats(self, hosts: set[str]) -> dict[str, dt.datetime]:
        cached = self._beats
        # Listed again when a host has appeared since: its first heartbeat is likely there now.
        if (
            cached is not None
            and time.monotonic() - cached[0] < HEARTBEATS_FRESH_SECONDS
            and hosts <= cached[1].keys()
        ):
            return cached[1]
        beats = self._list_heartbeats()
        self._beats = (time.monotonic(), beats)
        return beats

    def _list_heartbeats(self) -> dict[str, dt.datetime]:
        leases = self._leases.list_namespaced_lease(
            self._namespace, label_selector=c.HOST_LABEL, _request_timeout=REQUEST_TIMEOUT
        )
        beats: dict[str, dt.datetime] = {}
        for lease in leases.items:
            labels = (lease.metadata.labels if lease.metadata is not None else None) or {}
            host = labels.get(c.HOST_LABEL)
            renewed = lease.spec.renew_time if lease.spec is not None else None
            if host and isinstance(renewed, dt.datetime):
                beats[host] = renewed
        return beats

    def _demand(
        self,
        obj: Obj,
        host: HostView | None,
        catalog: Any,
        per_host_pools: frozenset[str],
    ) -> Demand:
        """What a placed machine takes on its host (nothing when it cannot be resolved there:
        then nothing is built for it either)."""
        vm = self._linked_vm(obj)
        if vm is None or host is None:
            return Demand()
        key = _key(obj)
        # By generation, not resourceVersion: status writes (frequent) leave what a machine
        # takes unchanged. The catalog may change it too; the cache is dropped with each term.
        versions = (
            str(obj["metadata"].get("generation")),
            str((vm.get("metadata") or {}).get("generation")),
            host.name,
        )
        cached = self._demands.get(key)
        if cached is not None and cached[0] == versions:
            return cached[1]
        fit = self._fit(obj, vm, catalog, per_host_pools)
        found = fit(host) if fit is not None else Misfit("invalid")
        demand = found if isinstance(found, Demand) else Demand()
        self._demands[key] = (versions, demand)
        return demand

    def _linked_vm(self, obj: Obj) -> Obj | None:
        meta = obj.get("metadata") or {}
        name = (meta.get("annotations") or {}).get(vmapi.LINK_ANNOTATION)
        return self.vms.get(f"{meta.get('namespace')}/{name}") if name else None

    @staticmethod
    def _fit(obj: Obj, vm: Obj, catalog: Any, per_host_pools: frozenset[str]) -> ResolverFit | None:
        try:
            machine = LibvirtMachine.model_validate(obj)
            spec = VirtualMachineSpec.model_validate(vm.get("spec") or {})
        except ValidationError:
            return None
        return ResolverFit(
            vm_name=str((vm.get("metadata") or {}).get("name")),
            vm=spec,
            machine=machine,
            catalog=catalog,
            per_host_pools=per_host_pools,
        )

    # -- placing one machine -----------------------------------------------------------------

    def _place(
        self,
        obj: Obj,
        views: list[HostView],
        ledger: Ledger,
        catalog: Any,
        per_host_pools: frozenset[str],
    ) -> bool:
        """True when the machine was bound (or needs nothing from placement)."""
        vm = self._linked_vm(obj)
        if vm is None:
            return False  # the generic controller links it first; the VM's arrival wakes us
        try:
            machine = LibvirtMachine.model_validate(obj)
            spec = VirtualMachineSpec.model_validate(vm.get("spec") or {})
        except ValidationError as err:
            where = "LibvirtMachine" if "metadata" in str(err) else "VirtualMachine.spec"
            message = "; ".join(f"{p}: {m}" for p, m in validation_details(err, where))
            self._report(obj, c.REASON_INVALID_SPEC, message)
            return False
        fit = ResolverFit(
            vm_name=str(vm["metadata"]["name"]),
            vm=spec,
            machine=machine,
            catalog=catalog,
            per_host_pools=per_host_pools,
        )
        placement = machine.spec.placement
        request = Request(
            namespace=machine.metadata.namespace,
            failure_domain=spec.failure_domain,
            selector=placement.host_selector if placement else None,
            spread_group=placement.spread_group if placement else None,
            spread_by=placement.spread_by if placement else SpreadBy.HOST,
        )
        decision = decide(request, views, fit, ledger)
        if decision.host is None:
            if fit.problems:
                problems = fit.problems
                self._report(obj, problems[0].reason, "; ".join(str(p) for p in problems))
            # Hosts register as their daemons start, at the same moment as the placer:
            # "no host" in the first seconds of a term is that, not news for the user.
            elif time.monotonic() - self._started >= STARTUP_GRACE_SECONDS:
                self._report(obj, vmapi.REASON_WAITING_FOR_CAPACITY, decision.message)
            return False
        assert decision.demand is not None
        key, group = _key(obj), _group(obj)
        with self._lock:
            self._assumed[key] = _Assumed(decision.host, decision.demand, group, time.monotonic())
        ledger.put(key, decision.host, decision.demand, pending=True, group=group)
        self._binder.submit(self._bind_or_forget, obj, decision)
        return True

    def _bind_or_forget(self, obj: Obj, decision: Decision) -> None:
        """On a binding thread: bind, or forget the assumed placement and look again."""
        try:
            bound = self._bind(obj, decision)
        except Exception as err:  # a failed binding is decided again
            log.warning("binding %s to %s failed: %s", _key(obj), decision.host, err)
            bound = False
        if not bound:
            with self._lock:
                self._assumed.pop(_key(obj), None)
            self._wake.set()

    def _bind(self, obj: Obj, decision: Decision) -> bool:
        """True when the machine is bound (or gone)."""
        assert decision.host is not None
        meta = obj["metadata"]
        version = str(meta["resourceVersion"])
        for _attempt in range(3):
            body = {
                "metadata": {"resourceVersion": version, "labels": {c.HOST_LABEL: decision.host}},
                "spec": {"host": decision.host},
            }
            try:
                self._patch_machine(meta, body)
                break
            except ApiException as err:
                if err.status == 404:
                    return True
                if err.status != 409:
                    raise
            # Changed since the copy was taken, most often by the generic controller adopting
            # it (an owner reference): the decision stands while the spec is the same.
            fresh = self._fresh(meta)
            if fresh is None or not self._unplaced(fresh):
                return fresh is None
            if fresh["metadata"].get("generation") != meta.get("generation"):
                return False  # the spec changed: decide again on the next pass
            version = str(fresh["metadata"]["resourceVersion"])
        else:
            return False
        crash_point("place:after-bind")
        key, group = _key(obj), _group(obj)
        self._reported.pop(key, None)
        log.info("placed %s on host %s", key, decision.host)
        self._store.event(obj, reason=c.EVENT_PLACED, message=f"placed on host {decision.host}")
        if not decision.spread_honoured:
            self._store.event(
                obj,
                reason=c.EVENT_SPREAD_NOT_HONOURED,
                message=f"spread group {group[1] if group else ''!r} already has a machine on "
                f"every host (or zone) that fits; placed on {decision.host} beside one",
                warning=True,
            )
        return True

    def _patch_machine(self, meta: Mapping[str, Any], body: Obj) -> None:
        self._custom.patch_namespaced_custom_object(
            c.GROUP,
            c.VERSION,
            meta["namespace"],
            c.MACHINE_PLURAL,
            meta["name"],
            body,
            _request_timeout=REQUEST_TIMEOUT,
        )

    def _fresh(self, meta: Mapping[str, Any]) -> Obj | None:
        try:
            found = self._custom.get_namespaced_custom_object(
                c.GROUP,
                c.VERSION,
                meta["namespace"],
                c.MACHINE_PLURAL,
                meta["name"],
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return found if isinstance(found, dict) else None

    # -- reporting ---------------------------------------------------------------------------

    def _report(self, obj: Obj, reason: str, message: str) -> None:
        """InfrastructureReady and UpToDate False with `reason` on the unplaced machine (its VM
        copies them), and a Warning Event once per message."""
        self._write_conditions(obj, vmapi.STATUS_FALSE, reason, message)
        key = _key(obj)
        if self._reported.get(key) != message:
            self._reported[key] = message
            self._store.event(obj, reason=reason, message=message, warning=True)

    def _report_host(
        self, obj: Obj, host: str, view: HostView | None, *, known: bool, now: dt.datetime
    ) -> None:
        """A machine whose host stopped its heartbeat, or whose host has no LibvirtHost at all,
        is said to be so (never moved)."""
        stays = (
            "the machine's state is unknown; it stays on its host and is not recreated elsewhere"
        )
        if view is not None:
            if view.ready or not view.heartbeat_lost:
                return
            if time.monotonic() - self._answered_since < c.HEARTBEAT_GRACE_SECONDS:
                # The host may not have been able to renew either. Placement still avoids it
                # (it is not ready), but its machines are not declared stranded yet.
                return
            message = (
                f"host {host} has not renewed its heartbeat for over "
                f"{int(c.HEARTBEAT_GRACE_SECONDS)} s: {stays}"
            )
        elif known:
            return  # its daemon has not written a first inventory yet
        else:
            created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
            # A host's daemon creates its LibvirtHost as it starts: give a new machine the time.
            if created is None or (now - created).total_seconds() <= c.HEARTBEAT_GRACE_SECONDS:
                return
            message = (
                f"no LibvirtHost named {host} exists (its daemon never ran, or the host was "
                f"removed): {stays}"
            )
        conditions = (obj.get("status") or {}).get("conditions") or []
        ready = find_condition(conditions, vmapi.CONDITION_INFRASTRUCTURE_READY)
        if ready is not None and ready.get("reason") == c.REASON_HOST_NOT_READY:
            return
        self._write_conditions(obj, vmapi.STATUS_UNKNOWN, c.REASON_HOST_NOT_READY, message)
        self._store.event(obj, reason=c.REASON_HOST_NOT_READY, message=message, warning=True)

    def _write_conditions(self, obj: Obj, status: str, reason: str, message: str) -> None:
        current = obj.get("status") or {}
        generation = (obj.get("metadata") or {}).get("generation")
        desired = dict(current)
        desired["conditions"] = merge_conditions(
            current.get("conditions"),
            [
                DesiredCondition(vmapi.CONDITION_INFRASTRUCTURE_READY, status, reason, message),
                DesiredCondition(vmapi.CONDITION_UP_TO_DATE, status, reason, message),
            ],
            generation=generation if isinstance(generation, int) else None,
            now=format_time(dt.datetime.now(dt.UTC)),
        )
        patch = merge_patch(current, desired)
        if not patch:
            return
        meta = obj["metadata"]
        try:
            self._store.patch_machine_status(str(meta["namespace"]), str(meta["name"]), patch)
        except Exception as err:
            log.info("reporting on %s failed: %s", _key(obj), err)

    def _keep_label(self, obj: Obj, host: str) -> None:
        """The host label follows spec.host (a user may pin with spec.host alone)."""
        meta = obj.get("metadata") or {}
        spec_host = (obj.get("spec") or {}).get("host")
        if not spec_host or (meta.get("labels") or {}).get(c.HOST_LABEL):
            return
        try:
            self._patch_machine(meta, {"metadata": {"labels": {c.HOST_LABEL: host}}})
        except ApiException as err:
            log.info("labelling %s with its host failed: %s", _key(obj), err)


def host_view(obj: Obj, heartbeat: dt.datetime | None, now: dt.datetime) -> HostView | None:
    """A LibvirtHost and its heartbeat as placement compares them; None before its daemon has
    written a first inventory."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    offers = status.get("offers")
    room = allocatable_of_status(status)
    if not isinstance(offers, Mapping) or room is None:
        return None
    try:
        spec = LibvirtHostSpec.model_validate(obj.get("spec") or {})
    except ValidationError:
        spec = LibvirtHostSpec()
    ready_condition = find_condition(status.get("conditions"), c.HOST_CONDITION_READY) or {}
    fresh = heartbeat is not None and (now - heartbeat).total_seconds() <= c.HEARTBEAT_GRACE_SECONDS
    pools = {
        str(p.get("name")): parse_size(p.get("available"))
        for p in (status.get("capacity") or {}).get("pools") or []
    }
    return HostView(
        name=str(meta.get("name")),
        labels=dict(meta.get("labels") or {}),
        ready=fresh and ready_condition.get("status") == "True",
        heartbeat_lost=not fresh,
        unschedulable=spec.unschedulable,
        cpus=room[0],
        memory=room[1],
        pools=pools,
        domain_types=frozenset(offers.get("domainTypes") or ()),
        networks=frozenset(offers.get("networks") or ()),
        machine_types=frozenset(offers.get("machineTypes") or ()),
        uefi=bool(offers.get("uefi")),
    )
