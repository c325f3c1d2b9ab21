"""Leader election over a `coordination.k8s.io` Lease, stoppable, with exactly one leader term
running at a time.

Why not the client library's elector: it sleeps in loops that cannot be interrupted, so a
stopping daemon waits for it; an API error inside its loop ends the term without calling the
"stopped leading" callback, after which a retry starts a second term beside the first; and it
logs every renewal at INFO. Here a term starts only after the previous one's `on_stop` returned,
every failure path ends the term through `on_stop`, waits are on a stop flag, and only
transitions are logged at INFO.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from generic.adapters.kubeclient import (
    API_ERRORS,
    ApiFailure,
    KubeApi,
    describe_failure,
    failure_of,
)
from generic.background import BackgroundLoop
from generic.formats import parse_micro_time
from generic.lease import LeaseRecord, may_hold

__all__ = ["LeaseElector"]

log = logging.getLogger(__name__)


class LeaseElector:
    """Campaigns for one Lease on a thread of its own; `on_start` and `on_stop` run on it."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        on_start: Callable[[], None],
        on_stop: Callable[[], None],
        lease_seconds: int = 15,
        renew_deadline: float = 10.0,
        retry_period: float = 4.0,
        request_timeout: float = 5.0,
        labels: dict[str, str] | None = None,
        annotations: Mapping[str, str | None] | None = None,
        thread_name: str = "leader-election",
    ) -> None:
        self._leases = KubeApi(api)
        self._labels = dict(labels or {})
        # What the holder says about itself on the Lease (where to reach it, say), written at
        # every renewal and removed when it hands the Lease back; a None value removes what a
        # former holder wrote under that key.
        self._annotations = dict(annotations or {})
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self._on_start = on_start
        self._on_stop = on_stop
        self._lease_seconds = lease_seconds
        self._renew_deadline = renew_deadline
        self._retry = retry_period
        self._timeout = request_timeout
        self._loop = BackgroundLoop(thread_name, self._campaign)
        self.leading = False

    def start(self) -> None:
        self._loop.start()

    def stop(self, timeout: float = 15.0) -> bool:
        """End the campaign; a running term ends (`on_stop`) and the Lease is handed back. False
        when the campaign had not ended within `timeout` (its term may still be ending)."""
        return self._loop.stop(timeout)

    def alive(self) -> bool:
        return self._loop.alive()

    def _campaign(self, loop: BackgroundLoop) -> None:
        renewed_at: float | None = None
        waiting_for: str | None = None
        clock = time.monotonic
        try:
            while not loop.stopping:
                try:
                    held, holder = self._try_hold()
                except API_ERRORS as err:
                    log.debug("lease %s/%s: %s", self.namespace, self.name, describe_failure(err))
                    held, holder = False, None
                if held:
                    renewed_at = clock()
                    if not self.leading:
                        log.info(
                            "%s holds the lease %s/%s", self.identity, self.namespace, self.name
                        )
                        self.leading = True
                        waiting_for = None
                        self._on_start()
                elif self.leading and (
                    (holder is not None and holder != self.identity)
                    or renewed_at is None
                    or clock() - renewed_at > self._renew_deadline
                ):
                    log.warning("%s lost the lease %s/%s", self.identity, self.namespace, self.name)
                    self._end_term()
                elif not self.leading and holder is not None and holder != waiting_for:
                    waiting_for = holder
                    log.info(
                        "%s is waiting for the lease %s/%s, held by %s",
                        self.identity,
                        self.namespace,
                        self.name,
                        holder,
                    )
                loop.pause(self._retry)
        finally:
            if self.leading:
                self._end_term()
                self._release()

    def _end_term(self) -> None:
        self.leading = False
        try:
            self._on_stop()
        except Exception:
            log.exception("stopping the leader's work failed")

    def _try_hold(self) -> tuple[bool, str | None]:
        """Take or renew the Lease; (held, current holder)."""
        now = dt.datetime.now(dt.UTC)
        try:
            lease = self._leases.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self._timeout
            )
        except API_ERRORS as err:
            if failure_of(err) is not ApiFailure.NOT_FOUND:
                raise
            return self._create(now), self.identity
        spec = lease.get("spec") or {}
        lease["spec"] = spec
        record = LeaseRecord(
            holder=spec.get("holderIdentity"),
            renewed=parse_micro_time(spec.get("renewTime")),
            duration_seconds=spec.get("leaseDurationSeconds") or self._lease_seconds,
        )
        if not may_hold(record, identity=self.identity, now=now):
            return False, record.holder
        if record.holder != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = (spec.get("leaseTransitions") or 0) + 1
        spec["holderIdentity"] = self.identity
        spec["renewTime"] = now
        spec["leaseDurationSeconds"] = self._lease_seconds
        self._annotate(lease, keep=True)
        try:
            # The read's resourceVersion makes a concurrent taker's write fail here.
            self._leases.replace_namespaced_lease(
                self.name, self.namespace, lease, _request_timeout=self._timeout
            )
        except API_ERRORS as err:
            if failure_of(err) is ApiFailure.CONFLICT:
                return False, None
            raise
        return True, self.identity

    def _create(self, now: dt.datetime) -> bool:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if self._labels:
            metadata["labels"] = self._labels
        self._annotate({"metadata": metadata}, keep=True)
        body = {
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "acquireTime": now,
                "renewTime": now,
                "leaseDurationSeconds": self._lease_seconds,
                "leaseTransitions": 0,
            },
        }
        try:
            self._leases.create_namespaced_lease(
                self.namespace, body, _request_timeout=self._timeout
            )
        except API_ERRORS as err:
            if failure_of(err) is ApiFailure.CONFLICT:
                return False
            raise
        return True

    def _annotate(self, lease: dict[str, Any], *, keep: bool) -> None:
        """Write this holder's annotations into `lease` (or, `keep` False, remove them)."""
        if not self._annotations:
            return
        meta = lease.setdefault("metadata", {})
        annotations = dict(meta.get("annotations") or {})
        for key, value in self._annotations.items():
            if keep and value is not None:
                annotations[key] = value
            else:
                annotations.pop(key, None)
        if annotations:
            meta["annotations"] = annotations
        else:
            meta.pop("annotations", None)

    def _release(self) -> None:
        """Hand the Lease back, so another candidate takes over at its next try instead of
        waiting for the lease to run out. One quick attempt: a stopping daemon must not wait
        on an API server that is gone."""
        try:
            lease = self._leases.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self._timeout
            )
            spec = lease.get("spec")
            if not spec or spec.get("holderIdentity") != self.identity:
                return
            del spec["holderIdentity"]
            self._annotate(lease, keep=False)
            self._leases.replace_namespaced_lease(
                self.name, self.namespace, lease, _request_timeout=self._timeout
            )
            log.info("%s released the lease %s/%s", self.identity, self.namespace, self.name)
        except API_ERRORS as err:
            log.warning(
                "could not release the lease %s/%s: %s",
                self.namespace,
                self.name,
                describe_failure(err),
            )
