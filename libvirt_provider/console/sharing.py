"""How one machine's console is shared by its sessions (pure; docs/console.md, "Sharing").

All sessions of a machine on a daemon share one libvirt console stream; the shell
(`adapters/process/console_share.py`) hands each chunk the guest writes to every session's queue
and to the machine's replay ring. The decisions are here:

- what a request asks for (`ConsoleOptions`, from its query: `viewer`, `force`, `logs`,
  `follow`), and refusals of combinations that mean nothing;
- what a chunk does to a session's queue (`on_output`): the writer's queue is never cut (its
  bytes are never lost); when it is full, reading from the guest pauses until the writer caught up
  (the writer sets the pace, as with one session). A viewer whose backlog passes its bound is cut
  off with a reason instead: it never pauses the guest's console, so never slows the writer;
- the last output kept for a replay (`ReplayRing`), bounded in bytes;
- when a session is idle for too long (`idle_expired`).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from libvirt_provider.console.auth import Refusal
from libvirt_provider.console.routes import ConsoleRoute, ConsoleTarget, console_target
from libvirt_provider.console.sessions import VIEWER, WRITER

__all__ = [
    "CLIENT_GONE_REASON",
    "LOGS_END_REASON",
    "ConsoleOptions",
    "OutputDecision",
    "ReplayRing",
    "console_options",
    "idle_expired",
    "input_pieces",
    "logs_target",
    "on_output",
    "ping_due",
]

# The close reason once `--logs` without `--follow` was sent all there is (the plugin prints
# nothing for it).
LOGS_END_REASON = "end of the console log"

# Why a writer's session ended when its client's connection went away with input still unsent
# (a client killed in the middle of a paste): the rest is dropped, so the seat is free at once
# rather than after the guest's serial line took what a dead client sent.
CLIENT_GONE_REASON = "the client disconnected (its input not yet sent to the guest was dropped)"

_TRUE = frozenset({"", "1", "true", "yes"})
_FALSE = frozenset({"0", "false", "no"})
_KNOWN = frozenset({"viewer", "force", "logs", "follow"})


@dataclass(frozen=True)
class ConsoleOptions:
    """What a console request asks for."""

    viewer: bool = False
    force: bool = False
    logs: bool = False
    follow: bool = False

    @property
    def role(self) -> str:
        """The session's role: `--logs --follow` watches, as a viewer."""
        return VIEWER if self.viewer or self.logs else WRITER


def console_options(path: str) -> ConsoleOptions | Refusal:
    """The options in the query of `path`, or a 400 for unknown or contradictory ones."""
    _, _, query = path.partition("?")
    values: dict[str, bool] = {}
    for key, given in parse_qs(query, keep_blank_values=True).items():
        if key not in _KNOWN:
            return Refusal(400, "BadRequest", f"unknown console parameter {key!r}")
        value = given[-1].lower()
        if value not in _TRUE | _FALSE:
            return Refusal(400, "BadRequest", f"console parameter {key} takes true or false")
        values[key] = value in _TRUE
    options = ConsoleOptions(**values)
    if options.viewer and options.force:
        return Refusal(400, "BadRequest", "a viewer takes no seat over: viewer and force exclude")
    if options.logs and options.force:
        return Refusal(400, "BadRequest", "the console's log is read-only: logs and force exclude")
    if options.follow and not options.logs:
        return Refusal(400, "BadRequest", "follow goes with logs")
    return options


class OutputDecision(enum.Enum):
    QUEUE = "queue"  # queued, room left
    PAUSE = "pause"  # queued; stop reading from the guest until this session drains
    CUT = "cut"  # not queued: the session is too far behind and ends


def on_output(role: str, queued_chunks: int, queued_bytes: int, *, max_chunks: int,
              viewer_backlog: int) -> OutputDecision:  # fmt: skip
    """What one more chunk of output does to a session that has `queued_chunks` (this one
    included) and `queued_bytes` (this one included) waiting to be sent."""
    if role == VIEWER:
        return OutputDecision.CUT if queued_bytes > viewer_backlog else OutputDecision.QUEUE
    return OutputDecision.PAUSE if queued_chunks >= max_chunks else OutputDecision.QUEUE


def idle_expired(role: str, idle_seconds: float, *, writer_limit: float,
                 viewer_limit: float) -> bool:  # fmt: skip
    """Whether a session that has sent no input for `idle_seconds` has been idle too long (a
    limit of 0 or less: never)."""
    limit = viewer_limit if role == VIEWER else writer_limit
    return limit > 0 and idle_seconds >= limit


class ReplayRing:
    """The last `capacity` bytes of a machine's console output (not thread-safe: its owner
    holds a lock)."""

    def __init__(self, capacity: int, initial: bytes = b"") -> None:
        self._capacity = max(0, capacity)
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self.append(initial)

    @property
    def capacity(self) -> int:
        return self._capacity

    def append(self, data: bytes) -> None:
        if not data or self._capacity == 0:
            return
        if len(data) >= self._capacity:
            self._chunks.clear()
            self._chunks.append(data[-self._capacity :])
            self._size = self._capacity
            return
        self._chunks.append(data)
        self._size += len(data)
        while self._size > self._capacity:
            head = self._chunks[0]
            over = self._size - self._capacity
            if len(head) <= over:
                self._chunks.popleft()
                self._size -= len(head)
            else:
                self._chunks[0] = head[over:]
                self._size -= over

    def contents(self) -> bytes:
        return b"".join(self._chunks)

    def __len__(self) -> int:
        return self._size


def logs_target(
    route: ConsoleRoute, machine: Mapping[str, Any] | None, served_hosts: frozenset[str]
) -> ConsoleTarget | Refusal:
    """Where the machine's console log is: as `console_target`, but whatever its power state
    (a guest that stopped is when its log matters most)."""
    found = console_target(route, machine, served_hosts)
    if not isinstance(found, Refusal) or found.code != 409 or machine is None:
        return found
    status = dict(machine.get("status") or {})
    status["powerState"] = "PoweredOn"  # only the power state is set aside
    return console_target(route, {**machine, "status": status}, served_hosts)


def input_pieces(payload: bytes, size: int) -> list[bytes]:
    """A client's input frame in the pieces handed to the guest's console one at a time (the
    session checks between two that its client is still there)."""
    if size <= 0:
        raise ValueError(f"piece size must be positive, not {size}")
    return [payload[at : at + size] for at in range(0, len(payload), size)]


def ping_due(
    since_ping: float, since_input: float, *, idle_every: float, busy_every: float
) -> bool:
    """Whether a session pings its client now: every `idle_every` seconds, or every `busy_every`
    while the client's input came within that (a paste, whose client may die with nothing
    flowing back to show it)."""
    every = busy_every if since_input < busy_every else idle_every
    return since_ping >= every
