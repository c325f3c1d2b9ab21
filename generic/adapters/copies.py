"""Watch-fed copies of objects, so a controller's passes read memory instead of the API server.

Both controllers in the daemon keep copies: the provider of its host's LibvirtMachines and their
VMs, the generic controller (while it leads) of every VM in scope and every provider object of a
watched kind. Copies are fed by watch events and by the answers to the controller's own writes,
and each controller states when it reads the API server instead (no copy held yet, a conflict
that showed a copy was behind, a destructive step).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from generic.adapters.informer import slim

__all__ = ["Copies", "newer"]

Obj = dict[str, Any]
Key = tuple[str, str]
T = TypeVar("T")


def newer(candidate: Obj, held: Obj) -> bool:
    """Whether metadata `candidate`'s resourceVersion is later than `held`'s. The API server's
    versions are etcd revisions (integers) in practice; anything else counts as newer (the
    watch's order is then the best there is)."""
    try:
        return int(str(candidate.get("resourceVersion"))) > int(str(held.get("resourceVersion")))
    except (TypeError, ValueError):
        return True


def _key(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


class Copies:
    """The latest copy of each object of one kind, by (namespace, name); a copy is replaced only
    by a newer one (by resourceVersion), so an event delivered after a write's answer never takes
    the object back in time. What is kept of an object is `keep(obj)` (by default `informer.slim`);
    copies are handed out as deep copies, so no reader changes what another one sees."""

    def __init__(self, *, keep: Callable[[Obj], Obj] = slim) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._objects: dict[Key, Obj] = {}

    def put(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        key = _key(obj)
        with self._lock:
            held = self._objects.get(key)
            if held is None or newer(meta, held.get("metadata") or {}):
                self._objects[key] = self._keep(obj)

    def replace_all(self, objs: Iterable[Obj]) -> None:
        """Exactly `objs` from now on (a fresh list: what is not in it was deleted meanwhile)."""
        fresh = {_key(obj): self._keep(obj) for obj in objs}
        with self._lock:
            self._objects = fresh

    def drop(self, namespace: str, name: str) -> None:
        with self._lock:
            self._objects.pop((namespace, name), None)

    def clear(self) -> None:
        with self._lock:
            self._objects = {}

    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            held = self._objects.get((namespace, name))
        return copy.deepcopy(held) if held is not None else None

    def holds(self, namespace: str, name: str) -> bool:
        with self._lock:
            return (namespace, name) in self._objects

    def project(self, read: Callable[[Obj], T]) -> list[T]:
        """`read` of every copy held, under the lock and without the deep copies `get` hands
        out: for a cheap look at every copy at once (a scrape). `read` must not change or keep
        what it is given."""
        with self._lock:
            return [read(obj) for obj in self._objects.values()]

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)
