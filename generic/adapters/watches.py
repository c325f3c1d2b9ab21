"""Prompt propagation: watch every provider kind whose CRD carries the vm-api.io label.

How a provider's status change reaches the generic VM without a periodic poll:

1. kopf delivers every CustomResourceDefinition event to `ProviderWatchHub.on_crd` (a CRD watch is
   one cheap stream). A CRD labelled `vm-api.io/v1alpha1: v1alpha1` names a provider kind; for
   each such kind the hub runs one watch thread over that kind's objects in all namespaces. A CRD
   that is installed later, or labelled later, starts its thread then: no restart, no code change.
   A CRD that is deleted or loses the label stops it.
2. Each thread lists the kind once (mapping every object to its VM, so VMs reconciled before the
   watch existed are looked at again), then watches from that resourceVersion. Every event on a
   provider object enqueues the VM it names in its `vm-api.io/virtual-machine` annotation and the
   VM that holds its controller owner reference (they differ when a link was edited); the work
   queue deduplicates. A `ProviderIndex` remembers which VMs each object concerned, so a relist
   also wakes the VMs of objects deleted while no stream was open. The thread also keeps a copy
   of each object (metadata and status: all the reconciler reads of it), which is where the
   reconcile reads it from; the copy is updated before the VM is enqueued.
3. The loop is `listwatch.ListWatch`: streams end on purpose every `server_timeout` seconds and
   are resumed from the last resourceVersion (bookmarks keep it fresh); a client read timeout
   slightly above that detects a silently dead connection. A 410 Gone resumes with a fresh list.
   Errors back off, and the kind counts as not watched until the next list completes.

The cost at idle is one long-lived request per provider kind, independent of how many objects
exist. Only once a kind's first list has completed does it count as watched; until then, and for
kinds without the label, the reconciler re-checks adopted VMs on a timer instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client

from generic import constants as c
from generic.adapters.copies import Copies
from generic.adapters.informer import GENERIC_KEPT, slim
from generic.adapters.kubeclient import lean_decoder
from generic.adapters.listwatch import ListWatch, Target
from generic.errors import ApiError
from generic.gateway import ProviderKind
from generic.lean import lean
from generic.provider_index import ProviderIndex

__all__ = ["ProviderWatchHub", "is_provider_crd"]

log = logging.getLogger(__name__)

VmKey = tuple[str, str]


def _reconciler_view(obj: dict[str, Any]) -> dict[str, Any]:
    """What the reconciler reads of a provider object: its metadata and status (the spec is the
    provider's business, and most of the object's size), with only the labels and annotations
    it reads."""
    return {k: v for k, v in slim(lean(obj, GENERIC_KEPT)).items() if k != "spec"}


def is_provider_crd(crd: Mapping[str, Any]) -> bool:
    labels = (crd.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(c.PROVIDER_CRD_LABEL) == c.PROVIDER_CRD_LABEL_VALUE)


class _KindWatch:
    """The list-then-watch loop over one provider kind, for as long as it is wanted."""

    def __init__(self, hub: ProviderWatchHub, api: client.ApiClient, group: str, kind: str) -> None:
        self.group = group
        self.kind = kind
        self.established = threading.Event()
        self.copies = Copies(keep=_reconciler_view)
        self._hub = hub
        self._index = ProviderIndex()
        self._loop = ListWatch(
            api,
            name=f"generic-watch-{kind}.{group}",
            target=self._target,
            on_list=self._listed,
            on_event=self._event,
            on_failure=self.established.clear,
            server_timeout=hub.server_timeout,
            decode=lean_decoder(GENERIC_KEPT),
        )

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def _target(self) -> Target:
        kind = self._hub.resolve(self.group, self.kind)
        return kind.group, kind.version, kind.plural

    def _listed(self, objs: list[dict[str, Any]]) -> None:
        items = [obj for obj in objs if self._hub.wanted(obj)]
        self.copies.replace_all(items)
        self.established.set()
        self._hub.notify(self._index.replace(items))

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        if not self._hub.wanted(obj):
            return
        deleted = kind == "DELETED"
        # The copy first: the pass the notification starts reads it.
        if deleted:
            meta = obj["metadata"]
            self.copies.drop(str(meta.get("namespace")), str(meta.get("name")))
        else:
            self.copies.put(obj)
        self._hub.notify(self._index.update(obj, deleted=deleted))


def _unresolved(group: str, kind: str) -> ProviderKind:
    raise ApiError(f"no discovery yet for {kind}.{group}")


class ProviderWatchHub:
    """The set of provider-kind watches, kept equal to the set of labelled CRDs."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        enqueue: Callable[[VmKey], None],
        in_scope: Callable[[str], bool],
        server_timeout: float = 240.0,
    ) -> None:
        self._api = api
        self.server_timeout = server_timeout
        self._enqueue = enqueue
        self._in_scope = in_scope
        self._resolve: Callable[[str, str], ProviderKind] = _unresolved
        self._invalidate: Callable[[], None] = lambda: None
        self._lock = threading.Lock()
        self._watches: dict[tuple[str, str], _KindWatch] = {}
        self._closed = False

    def use_discovery(
        self, resolve: Callable[[str, str], ProviderKind], invalidate: Callable[[], None]
    ) -> None:
        """How kinds are resolved, and how a CRD change invalidates that (the gateway's, which
        itself reads this hub's copies: hence set after both exist, before any CRD arrives)."""
        self._resolve = resolve
        self._invalidate = invalidate

    def resolve(self, group: str, kind: str) -> ProviderKind:
        return self._resolve(group, kind)

    def wanted(self, obj: Mapping[str, Any]) -> bool:
        """Objects outside the controller's namespaces are neither kept nor acted on."""
        namespace = (obj.get("metadata") or {}).get("namespace")
        return isinstance(namespace, str) and self._in_scope(namespace)

    def copies_of(self, group: str, kind: str) -> Copies | None:
        """The kind's copies once its watch has listed, else None (read the API server)."""
        with self._lock:
            found = self._watches.get((group, kind))
        if found is None or not found.established.is_set():
            return None
        return found.copies

    def notify(self, keys: Iterable[VmKey]) -> None:
        for key in keys:
            if self._in_scope(key[0]):
                self._enqueue(key)

    def is_watched(self, group: str, kind: str) -> bool:
        with self._lock:
            found = self._watches.get((group, kind))
        return found is not None and found.established.is_set()

    def watched_count(self) -> int:
        """How many provider kinds are watched right now (for metrics)."""
        with self._lock:
            watches = list(self._watches.values())
        return sum(1 for each in watches if each.established.is_set())

    def on_crd(self, crd: Mapping[str, Any], *, deleted: bool) -> None:
        """Start or stop the watch of the kind a CRD defines, to match its label."""
        self._invalidate()
        spec = crd.get("spec") or {}
        group = spec.get("group")
        kind = (spec.get("names") or {}).get("kind")
        if not isinstance(group, str) or not isinstance(kind, str):
            return
        wanted = not deleted and is_provider_crd(crd)
        with self._lock:
            current = self._watches.get((group, kind))
            if wanted and current is None and not self._closed:
                started = _KindWatch(self, self._api, group, kind)
                self._watches[(group, kind)] = started
                started.start()
                log.info("watching provider kind %s.%s", kind, group)
            elif not wanted and current is not None:
                del self._watches[(group, kind)]
                current.stop()
                log.info("stopped watching provider kind %s.%s", kind, group)

    def stop(self) -> None:
        with self._lock:
            self._closed = True
            watches = list(self._watches.values())
            self._watches.clear()
        for each in watches:
            each.stop()
