"""This host's LibvirtHost and heartbeat: what the host has, offers and holds, and that it is alive.

Every daemon runs one agent, on a thread of its own. Every `HEARTBEAT_SECONDS` it renews the
host's Lease (as a kubelet renews its node's: one small write, the liveness signal placement
reads), reads the host's inventory from libvirt, and writes the LibvirtHost's status only when it
differs from what the object shows, so an idle fleet costs one write per host per heartbeat. The
object is watched (only this one, by a field selector): a user's edit of its spec is reflected at
once, and an edit of its status is put back.

It never writes another host's object, and never the spec or labels of its own (they are the
user's: cordon, overcommit, zone).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from pydantic import ValidationError

from generic.adapters.informer import ClusterInformer
from generic.adapters.kubeclient import API_ERRORS, REQUEST_TIMEOUT, ApiFailure, KubeApi, failure_of
from generic.background import BackgroundLoop
from generic.formats import merge_patch, parse_micro_time
from libvirt_provider import constants as c
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor
from libvirt_provider.driver.types import HostInventory
from libvirt_provider.errors import ProviderError
from libvirt_provider.host_api import LibvirtHostSpec, LibvirtHostStatus
from libvirt_provider.hosts.heartbeat import takeover_refused
from libvirt_provider.hosts.inventory import Demand, host_status
from libvirt_provider.hosts.placement import ZONE_LABEL, HostView
from libvirt_provider.hosts.view import host_view

__all__ = ["HostAgent", "admission_terms", "heartbeat_lease_name"]

log = logging.getLogger(__name__)

Allocations = Callable[[], tuple[Demand, int]]
# A remote host's link: the `Connected` reason and message (None: a local host, no condition).
LinkState = Callable[[], tuple[str, str]]
# Told the host's spec on every pass (it changes limits, a remote host's connection).
SpecListener = Callable[[LibvirtHostSpec], None]
# Posts an Event on the LibvirtHost: (object, reason, message, warning).
HostEvents = Callable[[dict[str, Any], str, str, bool], None]

# How long the first pass waits for the watch of the host's own object to list it.
FIRST_SYNC_SECONDS = 10.0
# The shortest time between two passes (each reads libvirt's inventory).
MIN_SYNC_SECONDS = 1.0


def admission_terms(obj: dict[str, Any] | None) -> object:
    """What of a LibvirtHost a machine is admitted against (`hosts/admission.py`): its
    readiness, spec, labels, allocatable and pools. When it changes, the machines the host
    refused are looked at again; the allocated figures (changed by every machine built) are not
    part of it."""
    if obj is None:
        return None
    status = obj.get("status") or {}
    ready = next(
        (x.get("status") for x in status.get("conditions") or () if x.get("type") == "Ready"), None
    )
    return (
        ready,
        repr(obj.get("spec")),
        repr(sorted(((obj.get("metadata") or {}).get("labels") or {}).items())),
        repr(status.get("allocatable")),
        repr((status.get("capacity") or {}).get("pools")),
        repr(status.get("offers")),
    )


def heartbeat_lease_name(host: str) -> str:
    return f"{c.HEARTBEAT_LEASE_PREFIX}{host}"


class HostAgent:
    """Keeps this host's LibvirtHost and heartbeat Lease current, on its own thread."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        hypervisor: LibvirtHypervisor,
        host: str,
        lease_namespace: str,
        allocations: Allocations,
        interval: float = c.HEARTBEAT_SECONDS,
        beat: bool = True,
        create: bool = True,
        link: LinkState | None = None,
        on_spec: SpecListener | None = None,
        events: HostEvents | None = None,
        on_admission_change: Callable[[], None] = lambda: None,
        preemptible: Allocations = lambda: (Demand(), 0),
        grace: float = c.HEARTBEAT_GRACE_SECONDS,
        hop_address: str | None = None,
    ) -> None:
        # A remote host's heartbeat Lease is its claim, renewed by the remote-mode supervisor; and
        # its LibvirtHost is the user's declaration: deleted, it must stay deleted.
        self._beats = beat
        self._creates = create
        self._link = link
        self._on_spec = on_spec
        self._events = events
        self._custom = self._leases = KubeApi(api)
        self._hv = hypervisor
        self._host = host
        self._namespace = lease_namespace
        self._allocations = allocations
        self._preemptible = preemptible
        self._grace = grace
        self._interval = interval
        self._hop_address = hop_address
        self._last_inventory: tuple[float, HostInventory] | None = None
        # Why the heartbeat Lease is not ours (held, fresh, by someone else), or None.
        self._lease_refused: str | None = None
        self._refused_by: str | None = None
        self._loop = BackgroundLoop(f"host-agent-{host}", self._run)
        self._admission_change = on_admission_change
        self._admission_terms: object = None

        # Told of every change of the host's object (its drain follows spec.drain); bound late.
        self.on_change: Callable[[], None] = lambda: None

        def changed(_type: str, obj: dict[str, Any] | None) -> None:
            self._loop.wake()
            self.on_change()
            terms = admission_terms(obj)
            if terms != self._admission_terms:
                self._admission_terms = terms
                self._admission_change()

        self.informer = ClusterInformer(
            api,
            group=c.GROUP,
            version=c.VERSION,
            plural=c.HOST_PLURAL,
            field_selector=f"metadata.name={host}",
            on_change=changed,
        )

    def start(self) -> None:
        self.informer.start()
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop(timeout=0)
        self.informer.stop()
        self._loop.stop(REQUEST_TIMEOUT[1] * 2)

    def alive(self) -> bool:
        return self._loop.alive()

    def zone(self) -> str | None:
        """The zone label the user put on this host's LibvirtHost, if any."""
        obj = self.informer.get(self._host)
        labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
        zone = labels.get(ZONE_LABEL)
        return zone if isinstance(zone, str) else None

    def view(self) -> HostView | None:
        """This host as placement sees it, from its LibvirtHost (what it admits machines
        against); its own heartbeat counts as fresh: this daemon is the one renewing it."""
        obj = self.informer.get(self._host)
        if obj is None:
            return None
        now = dt.datetime.now(dt.UTC)
        return host_view(obj, now, now)

    def lease_problem(self) -> str | None:
        """Why this daemon does not renew its host's heartbeat Lease (a readiness check)."""
        return self._lease_refused

    def allocations_changed(self) -> None:
        """A machine of this host was resolved anew or went away: the allocated figures are
        written at once (at most once a second), not at the next heartbeat."""
        self._loop.wake()

    def _run(self, loop: BackgroundLoop) -> None:
        # The object's copy first (a moment): a new host's LibvirtHost is then created at once,
        # not a heartbeat later, and placement can use the host from its first seconds.
        self.informer.wait_synced(FIRST_SYNC_SECONDS)
        last_beat = last_sync = -math.inf
        while not loop.stopping:
            loop.begin_pass()
            if self._beats and time.monotonic() - last_beat >= self._interval:
                last_beat = time.monotonic()
                try:
                    self._beat()
                except API_ERRORS as err:
                    log.warning("host %s: renewing the heartbeat Lease failed: %s", self._host, err)
            try:
                self._sync()
            except API_ERRORS as err:
                log.warning("host %s: writing the LibvirtHost failed: %s", self._host, err)
            except Exception:  # a bug must not end the heartbeat for good
                log.exception("host %s: the LibvirtHost pass failed", self._host)
            last_sync = time.monotonic()
            # Until the next heartbeat, unless woken: a change of the object (a user's edit) or
            # of what the host's machines take.
            loop.wait(self._interval - (time.monotonic() - last_beat))
            # A burst of changes (machines being created) is written once a second at most.
            loop.pause(MIN_SYNC_SECONDS - (time.monotonic() - last_sync))

    def _beat(self) -> None:
        now = dt.datetime.now(dt.UTC)
        name = heartbeat_lease_name(self._host)
        spec = {
            "holderIdentity": self._host,
            "leaseDurationSeconds": max(1, round(self._grace)),
            "renewTime": now,
        }
        try:
            lease = self._leases.read_namespaced_lease(
                name, self._namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except API_ERRORS as err:
            if failure_of(err) is not ApiFailure.NOT_FOUND:
                raise
            lease = None
        if lease is not None:
            held = lease.get("spec") or {}
            refused = takeover_refused(
                self._host,
                held.get("holderIdentity"),
                parse_micro_time(held.get("renewTime")),
                held.get("leaseDurationSeconds"),
                now,
                grace=self._grace,
            )
            # Logged once per holder (the message's age moves with every beat).
            holder = str(held.get("holderIdentity")) if refused is not None else None
            if holder != self._refused_by:
                if refused is not None:
                    log.error("host %s: %s", self._host, refused)
                else:
                    log.info("host %s: the heartbeat Lease is this daemon's again", self._host)
            self._lease_refused, self._refused_by = refused, holder
            if refused is not None:
                return
            # The version read: a claim taken meanwhile makes this write conflict, not win.
            meta: dict[str, Any] = {"resourceVersion": lease["metadata"]["resourceVersion"]}
            published = ((lease.get("metadata") or {}).get("annotations") or {}).get(
                c.HOP_ADDRESS_ANNOTATION
            )
            if published != self._hop_address:
                # Null removes an address a former run of this daemon, or another holder,
                # published: a hop must not reach a daemon that no longer serves the host.
                meta["annotations"] = {c.HOP_ADDRESS_ANNOTATION: self._hop_address}
            self._leases.patch_namespaced_lease(
                name,
                self._namespace,
                {"metadata": meta, "spec": spec},
                _request_timeout=REQUEST_TIMEOUT,
            )
            return
        self._lease_refused = self._refused_by = None
        body = {
            "metadata": {
                "name": name,
                "labels": {c.HOST_LABEL: self._host},
                "namespace": self._namespace,
                **(
                    {"annotations": {c.HOP_ADDRESS_ANNOTATION: self._hop_address}}
                    if self._hop_address
                    else {}
                ),
            },
            "spec": {**spec, "acquireTime": now},
        }
        self._leases.create_namespaced_lease(
            self._namespace, body, _request_timeout=REQUEST_TIMEOUT
        )

    def _sync(self) -> None:
        if not self.informer.wait_synced(0):
            return
        if self._lease_refused is not None:
            # The host is someone else's (a remote host's replica, or another daemon with this
            # --host): its object is theirs to write, and two writers would flap it.
            return
        obj = self.informer.get(self._host)
        if obj is None:
            if self._creates:
                self._create()
            return
        meta = obj.get("metadata") or {}
        try:
            spec = LibvirtHostSpec.model_validate(obj.get("spec") or {})
        except ValidationError:
            spec = LibvirtHostSpec()
        if self._on_spec is not None:
            self._on_spec(spec)
        link = self._link() if self._link is not None else None
        if link is not None and link[0] != c.REASON_CONNECTED:
            # What was read over the connection that went (another URI, other credentials:
            # maybe another machine) is no inventory of this host now: Ready follows the link.
            self._last_inventory = None
        inventory, problem = self._inventory()
        current = obj.get("status") or {}
        try:
            previous: LibvirtHostStatus | None = LibvirtHostStatus.model_validate(current)
        except ValidationError:
            previous = None  # a user's edit the model refuses: rewritten whole
        allocated, machines = self._allocations()
        body = host_status(
            inventory,
            spec,
            allocated=allocated,
            machines=machines,
            preemptible=self._preemptible(),
            problem=problem,
            previous=previous,
            generation=meta.get("generation"),
            now=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            connection=link,
        )
        if link is not None:
            self._report_link(obj, previous, link)
        # A merge patch with null for every key the new status lacks, at every depth (say
        # allocated.preemptible once the last spot machine left): a user's additions go too.
        patch = merge_patch(current, body)
        if patch is None:
            return
        self._custom.patch_cluster_custom_object_status(
            c.GROUP,
            c.VERSION,
            c.HOST_PLURAL,
            self._host,
            {"status": patch},
            _request_timeout=REQUEST_TIMEOUT,
        )

    def _report_link(
        self, obj: dict[str, Any], previous: LibvirtHostStatus | None, link: tuple[str, str]
    ) -> None:
        """An Event when the link's reason changes: a Warning for a problem, Normal when the host
        is reached again (the first connection of a fresh object too)."""
        before = next(
            (
                cond
                for cond in ((previous.conditions or []) if previous is not None else [])
                if cond.type == c.HOST_CONDITION_CONNECTED
            ),
            None,
        )
        if self._events is None or (before is not None and before.reason == link[0]):
            return
        self._events(obj, link[0], link[1], link[0] != c.REASON_CONNECTED)

    def _inventory(self) -> tuple[HostInventory | None, str | None]:
        """libvirt's inventory, read at most once a heartbeat: the passes in between (a change
        of the object or of the machines' allocations) change nothing that libvirt reports."""
        cached = self._last_inventory
        # With a second's slack: the next heartbeat's pass starts `interval` after this one
        # started, so the read, stamped when it ended, is a little younger than `interval`
        # then, and without slack every other heartbeat would reuse it (libvirt read every 20 s).
        if cached is not None and time.monotonic() - cached[0] < self._interval - MIN_SYNC_SECONDS:
            return cached[1], None
        try:
            inventory = self._hv.host_inventory()
        except ProviderError as err:
            self._last_inventory = None
            return None, f"libvirtd does not answer: {err}"
        self._last_inventory = (time.monotonic(), inventory)
        return inventory, None

    def _create(self) -> None:
        body = {
            "apiVersion": f"{c.GROUP}/{c.VERSION}",
            "kind": c.HOST_KIND,
            "metadata": {"name": self._host},
            "spec": {},
        }
        try:
            self._custom.create_cluster_custom_object(
                c.GROUP, c.VERSION, c.HOST_PLURAL, body, _request_timeout=REQUEST_TIMEOUT
            )
            log.info("created LibvirtHost %s", self._host)
        except API_ERRORS as err:
            if failure_of(err) is not ApiFailure.CONFLICT:
                raise
        # Its status is written when the watch brings the object back (that wakes the agent).
