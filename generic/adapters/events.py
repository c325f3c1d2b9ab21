"""Posting Events for both controllers: one code path, repeats counted instead of re-posted.

`generic.events.EventSeries` decides; this module creates the core/v1 Event for the first
occurrence and patches its `count` and `lastTimestamp` for repeats. Posting an Event never fails
the caller: a problem is logged and the reconcile goes on.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from kubernetes import client

from generic.adapters.kubeclient import (
    API_ERRORS,
    REQUEST_TIMEOUT,
    ApiFailure,
    KubeApi,
    describe_failure,
    failure_of,
)
from generic.events import EventKey, EventSeries
from generic.formats import utc_now
from generic.gateway import EventType

__all__ = ["EventRecorder"]

log = logging.getLogger(__name__)


class EventRecorder:
    """Events about objects, from one component of this process."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        component: str,
        instance: str,
        host: str | None = None,
        series: EventSeries | None = None,
    ) -> None:
        self._core = KubeApi(api)
        self._component = component
        self._instance = instance
        self._host = host
        self._series = series or EventSeries()
        self._lock = threading.Lock()

    def record(
        self,
        involved: Mapping[str, Any],
        *,
        type_: EventType,
        reason: str,
        message: str,
        api_version: str | None = None,
        kind: str | None = None,
    ) -> None:
        meta = involved.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        message = message[:1024]
        key: EventKey = (str(meta.get("uid") or meta.get("name")), type_, reason, message)
        with self._lock:
            step = self._series.step(key)
        # The log tells what the daemon does to objects and why: the first of a series at INFO
        # (WARNING for a warning), repeats only at DEBUG.
        where = (
            f"{meta.get('namespace')}/{meta.get('name')}"
            if meta.get("namespace")
            else meta.get("name")
        )
        level = (
            logging.DEBUG
            if step.name is not None
            else (logging.WARNING if type_ == "Warning" else logging.INFO)
        )
        log.log(level, "%s %s: %s: %s", kind or involved.get("kind"), where, reason, message)
        try:
            if step.name is not None:
                try:
                    self._count(namespace, step.name, step.count)
                    return
                except API_ERRORS as err:
                    if failure_of(err) is not ApiFailure.NOT_FOUND:
                        raise
                    with self._lock:
                        self._series.lost(key)
            name = self._create(
                involved,
                namespace=namespace,
                type_=type_,
                reason=reason,
                message=message,
                api_version=api_version,
                kind=kind,
            )
            with self._lock:
                self._series.started(key, name)
        except API_ERRORS as err:
            log.warning(
                "could not record event %s on %s: %s",
                reason,
                meta.get("name"),
                describe_failure(err),
            )

    def _count(self, namespace: str, name: str, count: int) -> None:
        self._core.patch_namespaced_event(
            name,
            namespace,
            {"count": count, "lastTimestamp": utc_now()},
            _request_timeout=REQUEST_TIMEOUT,
        )

    def _create(
        self,
        involved: Mapping[str, Any],
        *,
        namespace: str,
        type_: EventType,
        reason: str,
        message: str,
        api_version: str | None,
        kind: str | None,
    ) -> str:
        meta = involved.get("metadata") or {}
        # Whole seconds, sent as the client library's model sent them (+00:00).
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        name = f"{meta.get('name', 'object')}.{uuid.uuid4().hex[:16]}"
        source: dict[str, str] = {"component": self._component}
        if self._host:
            source["host"] = self._host
        body = _without_none(
            {
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": {
                    "apiVersion": api_version or involved.get("apiVersion"),
                    "kind": kind or involved.get("kind"),
                    "name": meta.get("name"),
                    "namespace": namespace,
                    "uid": meta.get("uid"),
                    "resourceVersion": meta.get("resourceVersion"),
                },
                "type": type_,
                "reason": reason,
                "message": message,
                "source": source,
                "reportingComponent": self._component,
                "reportingInstance": self._instance,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
        )
        self._core.create_namespaced_event(namespace, body, _request_timeout=REQUEST_TIMEOUT)
        return name


def _without_none(value: Any) -> Any:
    """The body without its unset fields (an object without a uid, say), as the client library's
    model sent it."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value
