"""Who holds each machine's console: one writer and any number of viewers per machine.

Pure and thread-safe (a lock, no I/O): the shell asks for a seat before it opens (or joins) the
guest's console and gives it back the moment the client leaves, whatever way it leaves.

The seat rules (docs/console.md, "Sharing"): a second writer is refused, naming the holder,
unless it asks to take over (`force`); then the holder's seat is taken from it and returned as
`displaced`, and the shell ends that session (the displaced writer is dropped, not demoted: its
plugin says who took over, and the user may come back as a viewer or take over in turn).
Viewers never conflict with anyone.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

__all__ = ["VIEWER", "WRITER", "Seat", "SessionRegistry", "WriterBusyError"]

# A session's role, as the audit Events and the log say it.
WRITER = "writer"
VIEWER = "viewer"


@dataclass(frozen=True)
class Seat:
    """One session's hold on a machine's console."""

    machine: tuple[str, str]
    user: str
    serial: int
    role: str = WRITER


class WriterBusyError(Exception):
    """The machine's console has a writer already."""

    def __init__(self, holder: Seat) -> None:
        super().__init__(
            f"the console of {holder.machine[0]}/{holder.machine[1]} is in use by "
            f"{holder.user}; one writer at a time (--viewer to watch, --force to take over)"
        )
        self.holder = holder


class SessionRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writers: dict[tuple[str, str], Seat] = {}
        self._viewers: dict[tuple[str, str], set[Seat]] = {}
        self._serial = 0

    def take_writer(
        self, namespace: str, name: str, user: str, *, force: bool = False
    ) -> tuple[Seat, Seat | None]:
        """The writer's seat of the machine and the seat it displaced (with `force`), or
        `WriterBusyError` naming who has it."""
        key = (namespace, name)
        with self._lock:
            holder = self._writers.get(key)
            if holder is not None and not force:
                raise WriterBusyError(holder)
            seat = self._next(key, user, WRITER)
            self._writers[key] = seat
            return seat, holder

    def add_viewer(self, namespace: str, name: str, user: str) -> Seat:
        """A viewer's seat: always granted."""
        key = (namespace, name)
        with self._lock:
            seat = self._next(key, user, VIEWER)
            self._viewers.setdefault(key, set()).add(seat)
            return seat

    def _next(self, key: tuple[str, str], user: str, role: str) -> Seat:
        self._serial += 1
        return Seat(machine=key, user=user, serial=self._serial, role=role)

    def release(self, seat: Seat) -> bool:
        """Give the seat back; False when it was not held (released twice, or taken over)."""
        with self._lock:
            if seat.role == VIEWER:
                viewers = self._viewers.get(seat.machine, set())
                if seat not in viewers:
                    return False
                viewers.discard(seat)
                if not viewers:
                    del self._viewers[seat.machine]
                return True
            if self._writers.get(seat.machine) != seat:
                return False
            del self._writers[seat.machine]
            return True

    def holds(self, seat: Seat) -> bool:
        """Whether the seat is still held (a writer's may have been taken over)."""
        with self._lock:
            if seat.role == VIEWER:
                return seat in self._viewers.get(seat.machine, set())
            return self._writers.get(seat.machine) == seat

    def writers(self) -> list[Seat]:
        with self._lock:
            return list(self._writers.values())

    def viewers(self, namespace: str, name: str) -> list[Seat]:
        with self._lock:
            return sorted(self._viewers.get((namespace, name), ()), key=lambda s: s.serial)
