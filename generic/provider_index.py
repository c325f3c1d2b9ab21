"""Which VMs each watched provider object concerns, so that no change, not even a deletion that
happened while a watch stream was down, goes unnoticed.

A watch that is re-established with a fresh list does not report objects deleted in the gap.
This index remembers the objects seen and, when a new listing replaces the old, reports the VMs
of every object that vanished, the way an informer's "replace" does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from generic import constants as c

__all__ = ["ProviderIndex", "vm_keys_of_provider"]

VmKey = tuple[str, str]
ObjectKey = tuple[str, str]


def vm_keys_of_provider(obj: Mapping[str, Any]) -> set[VmKey]:
    """The VMs (namespace, name) a provider object concerns: its backlink and its controller."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    if not isinstance(namespace, str):
        return set()
    keys: set[VmKey] = set()
    annotations = meta.get("annotations") or {}
    backlink = annotations.get(c.LINK_ANNOTATION) if isinstance(annotations, dict) else None
    if isinstance(backlink, str) and backlink:
        keys.add((namespace, backlink))
    for ref in meta.get("ownerReferences") or []:
        if (
            isinstance(ref, dict)
            and ref.get("kind") == c.KIND
            and str(ref.get("apiVersion", "")).startswith(f"{c.GROUP}/")
            and isinstance(ref.get("name"), str)
        ):
            keys.add((namespace, ref["name"]))
    return keys


def _object_key(obj: Mapping[str, Any]) -> ObjectKey | None:
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    if isinstance(namespace, str) and isinstance(name, str):
        return namespace, name
    return None


class ProviderIndex:
    """Provider objects of one kind -> the VMs they concern. Not thread-safe: one per watch."""

    def __init__(self) -> None:
        self._vms: dict[ObjectKey, set[VmKey]] = {}

    def replace(self, objects: Iterable[Mapping[str, Any]]) -> set[VmKey]:
        """A fresh listing: the VMs of every listed object and of every object that vanished."""
        fresh: dict[ObjectKey, set[VmKey]] = {}
        for obj in objects:
            key = _object_key(obj)
            if key is not None:
                fresh[key] = vm_keys_of_provider(obj)
        affected: set[VmKey] = set()
        for key, vms in self._vms.items():
            if key not in fresh:
                affected |= vms
        for vms in fresh.values():
            affected |= vms
        self._vms = fresh
        return affected

    def update(self, obj: Mapping[str, Any], *, deleted: bool) -> set[VmKey]:
        """An event: the VMs the object concerns now and concerned before (links can move)."""
        key = _object_key(obj)
        if key is None:
            return set()
        before = self._vms.pop(key, set())
        now = vm_keys_of_provider(obj)
        if not deleted:
            self._vms[key] = now
        return before | now
