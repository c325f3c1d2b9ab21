"""What this host holds, and which machines it has admitted (`hosts/admission.py` decides).

The book is the host's "allocated" figures (the LibvirtHost's status) and the ledger a new
machine is admitted against: every machine whose domain exists here, and every machine admitted
and still being built. A machine refused is in neither. Admission checks and books in one step
under a lock, so two machines admitted on two workers at once account for each other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import NamedTuple

from libvirt_provider.hosts.admission import Booked, refusal, waits_for_preempted
from libvirt_provider.hosts.inventory import Demand, total
from libvirt_provider.hosts.placement import HostView, Request

__all__ = ["HostBook", "Refusal"]


class Refusal(NamedTuple):
    """Why the host does not admit a machine now, and whether that passes by itself within
    seconds: the daemon's start (no inventory of its own yet), or (`preempted_first`) the spot
    machines preempted to make room for it still shutting down."""

    message: str
    transient: bool
    preempted_first: bool = False


class HostBook:
    """`view` is the host as its LibvirtHost shows it; None admits every machine (a reconciler
    built without a host agent: unit tests of other concerns)."""

    def __init__(
        self,
        host: str,
        *,
        view: Callable[[], HostView | None] | None,
        on_change: Callable[[], None] = lambda: None,
        on_freed: Callable[[], None] = lambda: None,
    ) -> None:
        self._host = host
        self._view = view
        self._changed = on_change
        self._freed = on_freed
        self._lock = threading.Lock()
        self._booked: dict[str, Booked] = {}
        self._refused: set[str] = set()

    def admit(self, key: str, request: Request, demand: Demand) -> Refusal | None:
        """Book the machine `key` (no domain yet) and return None, or why the host refuses it.
        A machine admitted before is not judged again: only its demand is brought up to date."""
        with self._lock:
            held = self._booked.get(key)
            if held is None and self._view is not None:
                view = self._view()
                why = refusal(self._host, request, view, demand, self._booked.values())
                if why is not None:
                    self._refused.add(key)
                    if waits_for_preempted(request, view, demand, self._booked.values()):
                        return Refusal(
                            f"host {self._host} admits this machine once the spot machines "
                            "preempted there to make room are off (within their grace period)",
                            transient=True,
                            preempted_first=True,
                        )
                    return Refusal(why, transient=view is None)
            self._refused.discard(key)
            self._booked[key] = Booked(demand, pending=True)
        if held is None or held.demand != demand:
            self._changed()
        return None

    def record(self, key: str, demand: Demand, *, leaving: bool = False) -> None:
        """The machine `key` has a domain here: it is held, whatever admission would say now;
        `leaving` while it is preempted and shutting down."""
        self._put(key, Booked(demand, pending=False, leaving=leaving))

    def hold(self, key: str, demand: Demand) -> None:
        """The machine `key` has a domain here but its spec does not resolve now: it is held
        with `demand` (what its domain takes) unless it is held already, since a machine's
        last resolved demand says more than its domain's definition does (its volumes)."""
        with self._lock:
            if key in self._booked:
                return
        self.record(key, demand)

    def leaving(self, keys: list[str]) -> bool:
        """Mark the machines `keys` held here as preempted and shutting down (their own passes
        may not have run yet); True when that changed anything."""
        with self._lock:
            marked = [k for k in keys if k in self._booked and not self._booked[k].leaving]
            for key in marked:
                held = self._booked[key]
                self._booked[key] = Booked(held.demand, pending=held.pending, leaving=True)
        return bool(marked)

    def drop(self, key: str) -> None:
        """The machine `key` is gone from this host (deleted, or never admitted)."""
        self._put(key, None)

    def _put(self, key: str, entry: Booked | None) -> None:
        with self._lock:
            before = self._booked.pop(key, None)
            if entry is not None:
                self._booked[key] = entry
            self._refused.discard(key)
        if (before is None) != (entry is None) or (
            before is not None and entry is not None and before.demand != entry.demand
        ):
            self._changed()
        if before is not None and (
            entry is None
            or entry.demand.cpus < before.demand.cpus
            or entry.demand.memory < before.demand.memory
            # Preempted: the machines refused for want of its room wait for it quietly now.
            or (entry.leaving and not before.leaving)
        ):
            self._freed()

    def refused(self) -> list[str]:
        """The machines last refused (woken when capacity is freed or the host's spec changes)."""
        with self._lock:
            return sorted(self._refused)

    def allocations(self) -> tuple[Demand, int]:
        """The sum of what the machines held here take, and how many there are."""
        with self._lock:
            demands = [entry.demand for entry in self._booked.values()]
        return total(demands), len(demands)

    def preemptible(self) -> tuple[Demand, int]:
        """The part of the allocations that spot machines take (placement may reclaim it)."""
        with self._lock:
            demands = [entry.demand for entry in self._booked.values() if entry.demand.spot]
        return total(demands), len(demands)
