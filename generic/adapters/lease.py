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
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

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
        thread_name: str = "leader-election",
    ) -> None:
        self._leases = client.CoordinationV1Api(api)
        self._labels = dict(labels or {})
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self._on_start = on_start
        self._on_stop = on_stop
        self._lease_seconds = lease_seconds
        self._renew_deadline = renew_deadline
        self._retry = retry_period
        self._timeout = request_timeout
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._campaign, name=thread_name, daemon=True)
        self.leading = False

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 15.0) -> None:
        """End the campaign; a running term ends (`on_stop`) and the Lease is handed back."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _campaign(self) -> None:
        renewed_at: float | None = None
        waiting_for: str | None = None
        clock = time.monotonic
        try:
            while not self._stopping.is_set():
                try:
                    held, holder = self._try_hold()
                except (ApiException, HTTPError, OSError) as err:
                    log.debug("lease %s/%s: %s", self.namespace, self.name, _describe(err))
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
                self._stopping.wait(self._retry)
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
        except ApiException as err:
            if err.status != 404:
                raise
            return self._create(now), self.identity
        spec = lease.spec or client.V1LeaseSpec()
        record = LeaseRecord(
            holder=spec.holder_identity,
            renewed=spec.renew_time,
            duration_seconds=spec.lease_duration_seconds or self._lease_seconds,
        )
        if not may_hold(record, identity=self.identity, now=now):
            return False, record.holder
        if record.holder != self.identity:
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.holder_identity = self.identity
        spec.renew_time = now
        spec.lease_duration_seconds = self._lease_seconds
        lease.spec = spec
        try:
            # The read's resourceVersion makes a concurrent taker's write fail here.
            self._leases.replace_namespaced_lease(
                self.name, self.namespace, lease, _request_timeout=self._timeout
            )
        except ApiException as err:
            if err.status == 409:
                return False, None
            raise
        return True, self.identity

    def _create(self, now: dt.datetime) -> bool:
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(
                name=self.name, namespace=self.namespace, labels=self._labels or None
            ),
            spec=client.V1LeaseSpec(
                holder_identity=self.identity,
                acquire_time=now,
                renew_time=now,
                lease_duration_seconds=self._lease_seconds,
                lease_transitions=0,
            ),
        )
        try:
            self._leases.create_namespaced_lease(
                self.namespace, body, _request_timeout=self._timeout
            )
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

    def _release(self) -> None:
        """Hand the Lease back, so another candidate takes over at its next try instead of
        waiting for the lease to run out. One quick attempt: a stopping daemon must not wait
        on an API server that is gone."""
        try:
            lease = self._leases.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self._timeout
            )
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = None
            self._leases.replace_namespaced_lease(
                self.name, self.namespace, lease, _request_timeout=self._timeout
            )
            log.info("%s released the lease %s/%s", self.identity, self.namespace, self.name)
        except (ApiException, HTTPError, OSError) as err:
            log.warning(
                "could not release the lease %s/%s: %s", self.namespace, self.name, _describe(err)
            )


def _describe(err: Any) -> str:
    if isinstance(err, ApiException):
        return f"{err.status} {err.reason}"
    return f"{type(err).__name__}: {err}"
