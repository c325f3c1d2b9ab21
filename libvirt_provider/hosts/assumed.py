"""What the placer remembers between passes (pure): bindings it made that the copies do not show
yet, and the demand of each placed machine.

Its ledger is rebuilt from the watch-fed copies on every pass. A binding is written on a thread
of its own and comes back through the watch later, so until the copies show it the machine is
*assumed* on its host (kube-scheduler's assumed pods): a burst of placements accounts for each
other and never overcommits a host. An assumption the copies never confirm is forgotten after
`ASSUMED_SECONDS` (the watch lost it: the next relist shows the truth).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from libvirt_provider.hosts.inventory import Demand
from libvirt_provider.hosts.placement import Ledger

__all__ = ["ASSUMED_SECONDS", "Assumed", "Demands"]

ASSUMED_SECONDS = 60.0


@dataclass(frozen=True)
class _Binding:
    host: str
    demand: Demand
    group: tuple[str, str] | None
    at: float


class Assumed:
    """Machines decided and being (or just) bound, by machine key. Safe to use from the binding
    threads; times are the caller's monotonic seconds."""

    def __init__(self) -> None:
        self._bindings: dict[str, _Binding] = {}
        self._lock = threading.Lock()

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._bindings

    def assume(
        self, key: str, host: str, demand: Demand, group: tuple[str, str] | None, *, at: float
    ) -> None:
        with self._lock:
            self._bindings[key] = _Binding(host, demand, group, at)

    def forget(self, key: str) -> None:
        """The copies show the machine placed, or its binding failed (it is decided again)."""
        with self._lock:
            self._bindings.pop(key, None)

    def book(self, ledger: Ledger, *, now: float) -> None:
        """Put every assumption the ledger (built from the copies) lacks into it, as pending;
        forget those older than `ASSUMED_SECONDS`."""
        with self._lock:
            bindings = list(self._bindings.items())
        for key, binding in bindings:
            if now - binding.at > ASSUMED_SECONDS:
                self.forget(key)
            elif key not in ledger:
                ledger.put(key, binding.host, binding.demand, pending=True, group=binding.group)


class Demands:
    """The demand of each placed machine, kept while neither the machine's nor its VM's
    generation nor its host changes. By generation, not resourceVersion: status writes (frequent)
    leave what a machine takes unchanged. The catalog may change it too; the placer drops this
    with each term."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[tuple[str, str, str], Demand]] = {}

    def of(
        self,
        key: str,
        obj: Mapping[str, Any],
        vm: Mapping[str, Any],
        host: str,
        work: Callable[[], Demand],
    ) -> Demand:
        """The demand remembered for the machine `key` (`obj`, its VM `vm`) on `host` at their
        generations, else `work()`, remembered."""
        versions = (
            str((obj.get("metadata") or {}).get("generation")),
            str((vm.get("metadata") or {}).get("generation")),
            host,
        )
        cached = self._known.get(key)
        if cached is not None and cached[0] == versions:
            return cached[1]
        demand = work()
        self._known[key] = (versions, demand)
        return demand

    def keep_only(self, live: Collection[str]) -> None:
        """Forget the machines that no longer exist."""
        for key in [k for k in self._known if k not in live]:
            del self._known[key]
