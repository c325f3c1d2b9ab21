"""Who holds each machine's console: one writer per machine in this slice.

Pure and thread-safe (a lock, no I/O): the shell asks for the writer's seat before it opens the
guest's console and gives it back the moment the client leaves, whatever way it leaves.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

__all__ = ["Seat", "SessionRegistry", "WriterBusyError"]


@dataclass(frozen=True)
class Seat:
    """One session's hold on a machine's console."""

    machine: tuple[str, str]
    user: str
    serial: int


class WriterBusyError(Exception):
    """The machine's console has a writer already."""

    def __init__(self, holder: Seat) -> None:
        super().__init__(
            f"the console of {holder.machine[0]}/{holder.machine[1]} is in use by "
            f"{holder.user}; one writer at a time"
        )
        self.holder = holder


class SessionRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writers: dict[tuple[str, str], Seat] = {}
        self._serial = 0

    def take_writer(self, namespace: str, name: str, user: str) -> Seat:
        """The writer's seat of the machine, or `WriterBusyError` naming who has it."""
        key = (namespace, name)
        with self._lock:
            holder = self._writers.get(key)
            if holder is not None:
                raise WriterBusyError(holder)
            self._serial += 1
            seat = Seat(machine=key, user=user, serial=self._serial)
            self._writers[key] = seat
            return seat

    def release(self, seat: Seat) -> bool:
        """Give the seat back; False when it was not held (released twice)."""
        with self._lock:
            if self._writers.get(seat.machine) != seat:
                return False
            del self._writers[seat.machine]
            return True

    def writers(self) -> list[Seat]:
        with self._lock:
            return list(self._writers.values())
