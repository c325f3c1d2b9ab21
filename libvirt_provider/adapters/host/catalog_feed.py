"""The catalog's informers, one per kind for the whole process, shared by every host unit.

A daemon in remote mode serves many hosts; each host's machine controller listens for catalog
changes (a new image, a changed machine class, a changed VolumeAttributesClass), but one watch
per kind is enough, whatever the number of hosts. Units add and remove their listeners as they
start and stop. Kubernetes' own VolumeAttributesClasses are watched the same way, from their group
(`storage.k8s.io/v1`), since a disk's limits come from them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client import ApiClient

from catalog.constants import WATCHED_KINDS
from generic.adapters.informer import ClusterInformer
from libvirt_provider.adapters.runtime.shutdown import Step

__all__ = ["CatalogFeed", "Listener"]

Listener = Callable[[str, Mapping[str, Any] | None], None]


class CatalogFeed:
    """One informer per catalog kind for the whole process; each unit adds its listeners."""

    def __init__(self, api: ApiClient) -> None:
        self._lock = threading.Lock()
        self._listeners: dict[str, list[Listener]] = {p: [] for p in WATCHED_KINDS}
        self.informers = {
            plural: ClusterInformer(
                api,
                group=group,
                version=version,
                plural=plural,
                on_change=self._fan_out(plural),
            )
            for plural, (group, version) in WATCHED_KINDS.items()
        }

    def _fan_out(self, plural: str) -> Listener:
        def changed(event_type: str, obj: Mapping[str, Any] | None) -> None:
            with self._lock:
                listeners = list(self._listeners[plural])
            for listener in listeners:
                listener(event_type, obj)

        return changed

    def add(self, plural: str, listener: Listener) -> None:
        with self._lock:
            self._listeners[plural].append(listener)

    def remove(self, plural: str, listener: Listener) -> None:
        with self._lock:
            if listener in self._listeners[plural]:
                self._listeners[plural].remove(listener)

    def start(self) -> None:
        for informer in self.informers.values():
            informer.start()

    def stop_steps(self) -> list[Step]:
        return [(f"the {i.plural} informer", i.stop) for i in self.informers.values()]
