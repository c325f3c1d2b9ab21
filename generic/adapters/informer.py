"""A watch-fed, in-memory copy of one cluster-scoped custom resource kind.

A reconcile pass that lists a kind from the API server costs a cluster-wide LIST every time; with
hundreds of machines per host and passes on every change, those reads dominate the API server's
load and the daemon's CPU. An informer lists once, then follows a watch from the list's
resourceVersion, so reads are served from memory and the API server sees one long-lived
connection; `on_change` is called after each change is applied, so a reader woken by it sees the
change (a wake-up from a second watch of the same kind could arrive before the copy has it). It
relists after a 410 Gone (the resourceVersion is too old) and after any error,
with backoff, and it is `synced` only once a list has completed, so a caller never mistakes an
empty cache for an empty cluster: until then `items()` returns None and the caller reads the API.

Objects are kept as the API server sent them and handed out as they are: callers must not change
them.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from generic.adapters.kubeclient import REQUEST_TIMEOUT

__all__ = ["RELISTED", "ClusterInformer", "slim"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

# The event type `on_change` gets (with no object) when a relist found the copy changed: anything
# may have, including deletions whose watch events were lost.
RELISTED = "RELISTED"

# How long one watch request lasts before it is renewed (jittered so that many informers do not
# renew together); the API server ends it with a clean close.
WATCH_SECONDS = 300.0


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def slim(obj: Obj) -> Obj:
    """`obj` without what no reader here uses and what makes up much of an object's size: the
    managed-fields bookkeeping and kubectl's copy of the last applied manifest. An informer that
    holds every machine of a cluster holds them in memory for good."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    annotations = meta.get("annotations")
    if "managedFields" not in meta and not (
        isinstance(annotations, dict) and LAST_APPLIED in annotations
    ):
        return obj
    meta = {k: v for k, v in meta.items() if k != "managedFields"}
    if isinstance(annotations, dict) and LAST_APPLIED in annotations:
        meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    return {**obj, "metadata": meta}


def _key(meta: Obj) -> str:
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


class ClusterInformer:
    """Every object of one kind (`group`/`version`/`plural`) across the cluster, kept current;
    optionally only those a field selector picks. Namespaced objects are keyed `namespace/name`."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        group: str,
        version: str,
        plural: str,
        on_change: Callable[[str, Obj | None], None] = lambda _type, _obj: None,
        field_selector: str | None = None,
    ) -> None:
        self._selector: dict[str, Any] = (
            {"field_selector": field_selector} if field_selector else {}
        )
        self._custom = client.CustomObjectsApi(api)
        self._group, self._version, self._plural = group, version, plural
        self._on_change = on_change
        self._objects: dict[str, Obj] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stopped = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name=f"informer-{plural}", daemon=True)

    @property
    def plural(self) -> str:
        return self._plural

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopped.set()
        current = self._watch
        if current is not None:
            current.stop()  # type: ignore[no-untyped-call]
        if self._thread.is_alive():
            self._thread.join(timeout)

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def get(self, key: str) -> Obj | None:
        """The object named `key` (`namespace/name` for namespaced kinds), if the copy has it."""
        with self._lock:
            return self._objects.get(key)

    def items(self) -> list[Obj] | None:
        """Every object, or None while no list has completed (read the API then)."""
        if not self._synced.is_set():
            return None
        with self._lock:
            return list(self._objects.values())

    def _run(self) -> None:
        backoff = 0.5
        while not self._stopped.is_set():
            try:
                resource_version = self._list()
                backoff = 0.5
                self._follow(resource_version)
            except (ApiException, HTTPError, OSError, ValueError) as err:
                log.info("informer of %s.%s: %s; listing again", self._plural, self._group, err)
            except Exception:  # a bug must not leave the cache stale for good
                log.exception("informer of %s.%s failed", self._plural, self._group)
            self._stopped.wait(backoff * random.uniform(0.8, 1.2))
            backoff = min(backoff * 2, 30.0)

    def _list(self) -> str:
        listing = self._custom.list_cluster_custom_object(
            self._group,
            self._version,
            self._plural,
            _request_timeout=REQUEST_TIMEOUT,
            **self._selector,
        )
        if not isinstance(listing, dict):
            raise ValueError(f"listing {self._plural} returned {type(listing).__name__}")
        fresh = {
            _key(obj["metadata"]): slim(obj)
            for obj in listing.get("items") or []
            if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict)
        }
        with self._lock:
            changed = fresh != self._objects
            self._objects = fresh
        self._synced.set()
        if changed:
            self._on_change(RELISTED, None)
        return str(listing["metadata"]["resourceVersion"])

    def _follow(self, resource_version: str) -> None:
        """Apply watch events from `resource_version` until stopped; returns to relist on a 410."""
        while not self._stopped.is_set():
            self._watch = watch.Watch()  # type: ignore[no-untyped-call]
            seconds = WATCH_SECONDS * random.uniform(0.9, 1.1)
            try:
                for event in self._watch.stream(  # type: ignore[no-untyped-call]
                    self._custom.list_cluster_custom_object,
                    self._group,
                    self._version,
                    self._plural,
                    resource_version=resource_version,
                    allow_watch_bookmarks=True,
                    **self._selector,
                    timeout_seconds=int(seconds),
                    _request_timeout=(REQUEST_TIMEOUT[0], seconds + 30),
                ):
                    if self._stopped.is_set():
                        return
                    kind, obj = event.get("type"), event.get("object")
                    if kind == "ERROR":
                        if isinstance(obj, dict) and obj.get("code") == 410:
                            return
                        raise ValueError(f"watch error: {obj}")
                    if not isinstance(obj, dict):
                        continue
                    meta = obj.get("metadata") or {}
                    if meta.get("resourceVersion"):
                        resource_version = str(meta["resourceVersion"])
                    if kind == "BOOKMARK" or not meta.get("name"):
                        continue
                    with self._lock:
                        if kind == "DELETED":
                            self._objects.pop(_key(meta), None)
                        else:
                            self._objects[_key(meta)] = obj = slim(obj)
                    # After the copy changed: whoever is told reads what it was told about.
                    self._on_change(str(kind), obj)
                resource_version = self._watch.resource_version or resource_version
            except ApiException as err:
                if err.status == 410:
                    return
                raise
