"""A watch-fed, in-memory copy of one cluster-scoped custom resource kind.

A reconcile pass that lists a kind from the API server costs a cluster-wide LIST every time; with
hundreds of machines per host and passes on every change, those reads dominate the API server's
load and the daemon's CPU. An informer lists once, then follows a watch from the list's
resourceVersion, so reads are served from memory and the API server sees one long-lived
connection; `on_change` is called after each change is applied, so a reader woken by it sees the
change (a wake-up from a second watch of the same kind could arrive before the copy has it). The
loop is `listwatch.ListWatch` (relists after a 410 Gone or an error, with backoff); an informer
is `synced` only once a list has completed, so a caller never mistakes an empty cache for an
empty cluster: until then `items()` returns None and the caller reads the API.

Objects are kept as the API server sent them and handed out as they are: callers must not change
them.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client

from generic import constants as c
from generic.adapters.kubeclient import Decode
from generic.adapters.listwatch import ListWatch
from generic.lean import Kept, lean

__all__ = ["GENERIC_KEPT", "RELISTED", "ClusterInformer", "lean_slim", "slim", "without_status"]

Obj = dict[str, Any]

# The event type `on_change` gets (with no object) when a relist found the copy changed: anything
# may have, including deletions whose watch events were lost.
RELISTED = "RELISTED"

# How long one watch request lasts before it is renewed (jittered so that many informers do not
# renew together); the API server ends it with a clean close.
WATCH_SECONDS = 300.0


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


# Strings up to this length are interned in kept objects (keys always): the same field names,
# reasons, messages, kinds and groups recur in every object of a kind, and a thousand objects
# each decoded from its own watch event otherwise hold a thousand copies of each.
INTERN_UP_TO = 64


def slim(obj: Obj) -> Obj:
    """What a cache keeps of `obj`: a compact copy without what no reader here uses and what
    makes up much of an object's size, the managed-fields bookkeeping and kubectl's copy of the
    last applied manifest. Keys and short strings are interned, which halves the memory a kept
    LibvirtMachine or VirtualMachine takes (about 7.7 KB to 3.5 KB, `docs/operations.md`). An
    informer that holds every machine of a cluster holds them for good. `obj` is not changed."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta = {k: v for k, v in meta.items() if k != "managedFields"}
        annotations = meta.get("annotations")
        if isinstance(annotations, dict) and LAST_APPLIED in annotations:
            meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
        obj = {**obj, "metadata": meta}
    kept: Obj = _compact(obj)
    return kept


def without_status(obj: Obj) -> Obj:
    """`slim(obj)` without its status, for readers of what was asked, not of what was seen."""
    return slim({k: v for k, v in obj.items() if k != "status"})


GENERIC_KEPT = Kept.of(labels=c.KEPT_LABELS, annotations=c.KEPT_ANNOTATIONS)
"""The labels and annotations the generic controller reads."""


def lean_slim(kept: Kept, keep: Callable[[Obj], Obj] = slim) -> Callable[[Obj], Obj]:
    """`keep` of what `generic.lean.lean` keeps: for the objects a tenant writes (VMs, provider
    objects), whose labels and annotations no one bounds."""
    return lambda obj: keep(lean(obj, kept))


def _compact(value: Any) -> Any:
    if isinstance(value, dict):
        return {(sys.intern(k) if type(k) is str else k): _compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    if type(value) is str and len(value) <= INTERN_UP_TO:
        return sys.intern(value)
    return value


def _key(meta: Obj) -> str:
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


class ClusterInformer:
    """Every object of one kind (`group`/`version`/`plural`) across the cluster, kept current;
    optionally only those a field selector picks. Namespaced objects are keyed `namespace/name`.
    What is kept of each is `keep(obj)`: `slim` by default, less when its readers need less;
    `decode` (the client's by default) may drop what no reader uses before it is decoded."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        group: str,
        version: str,
        plural: str,
        on_change: Callable[[str, Obj | None], None] = lambda _type, _obj: None,
        field_selector: str | None = None,
        keep: Callable[[Obj], Obj] = slim,
        decode: Decode | None = None,
    ) -> None:
        self._group, self._plural = group, plural
        self._keep = keep
        self._on_change = on_change
        self._objects: dict[str, Obj] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._loop = ListWatch(
            api,
            name=f"informer-{plural}",
            target=lambda: (group, version, plural),
            on_list=self._listed,
            on_event=self._event,
            field_selector=field_selector,
            server_timeout=WATCH_SECONDS,
            decode=decode,
        )

    @property
    def plural(self) -> str:
        return self._plural

    def start(self) -> None:
        self._loop.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._loop.stop(timeout)

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

    def _listed(self, objs: list[Obj]) -> None:
        fresh = {_key(obj["metadata"]): self._keep(obj) for obj in objs}
        with self._lock:
            changed = fresh != self._objects
            self._objects = fresh
        self._synced.set()
        if changed:
            self._on_change(RELISTED, None)

    def _event(self, kind: str, obj: Obj) -> None:
        meta = obj["metadata"]
        with self._lock:
            if kind == "DELETED":
                self._objects.pop(_key(meta), None)
            else:
                self._objects[_key(meta)] = obj = self._keep(obj)
        # After the copy changed: whoever is told reads what it was told about.
        self._on_change(kind, obj)
