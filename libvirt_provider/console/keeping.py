"""Remote hosts' console logs, kept by the daemon that serves the host (pure; docs/console.md,
"Remote hosts' console logs").

qemu writes a machine's serial output into the `<log>` file of its domain, on the host qemu runs
on. On a remote host that file is out of the serving daemon's reach, so the daemon keeps the log
itself: for every running machine of a host it serves, one subscriber held on the machine's
shared console stream (`adapters/process/console_keeper.py`) writes each chunk to
`<--console-log-dir>/<domain>.serial.log`, rotated at a size bound. The decisions are here:

- which machines need a keeper, from the daemon's copies of its hosts' LibvirtMachines
  (`kept_machine`, `plan`): one that runs on a served host gets one; one that stopped loses its
  stream but keeps its files; one that is gone, or whose host this daemon no longer serves, loses
  its files too;
- when to try again after a console could not be opened, or its stream ended while the machine
  still runs (`retry_delay`): a doubling backoff, never a busy loop;
- the rotation's arithmetic (`fitting`, `rotates`, `log_files`) and what `--logs` reads of the
  current and rotated files (`tail_ranges`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.naming import machine_domain_name

__all__ = [
    "KeeperPlan",
    "KeeperState",
    "KeptMachine",
    "MachineKey",
    "failures_after_end",
    "fitting",
    "kept_machine",
    "log_files",
    "plan",
    "retry_delay",
    "rotates",
    "tail_ranges",
]

# A guest's console can be opened in these states (as `console/routes.py` lets sessions in).
_OPEN_STATES = frozenset({"PoweredOn", "Paused"})

MachineKey = tuple[str, str, str]  # namespace, name, uid


@dataclass(frozen=True)
class KeptMachine:
    """What the keeper needs of one LibvirtMachine of a served host."""

    namespace: str
    name: str
    uid: str
    domain: str
    running: bool

    @property
    def key(self) -> MachineKey:
        return (self.namespace, self.name, self.uid)


def kept_machine(obj: Mapping[str, Any]) -> KeptMachine | None:
    """The keeper's view of a LibvirtMachine (None without a uid: not one the API server made)."""
    meta = obj.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    if not uid:
        return None
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    status = obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    recorded = (status.get("providerMetadata") or {}).get("domainName")
    domain = machine_domain_name(
        namespace, name, uid, recorded=recorded if isinstance(recorded, str) else None
    )
    running = status.get("powerState") in _OPEN_STATES and not meta.get("deletionTimestamp")
    return KeptMachine(namespace, name, uid, domain, running)


@dataclass(frozen=True)
class KeeperState:
    """What the shell holds for one machine it kept a log for."""

    host: str
    machine: KeptMachine
    # A stream is open and feeding the log.
    open: bool
    # Not open: when the next try may be (monotonic seconds; 0: at once).
    retry_at: float = 0.0


@dataclass(frozen=True)
class KeeperPlan:
    """One pass's work: streams to open; machines that stopped, whose stream is closed (the files
    stay) and whose backoff is cleared (so their next start is kept at once); and machines to
    forget with their files."""

    open: tuple[tuple[str, KeptMachine], ...] = ()
    close: tuple[MachineKey, ...] = ()
    forget: tuple[MachineKey, ...] = ()


def plan(
    served: Mapping[str, Sequence[KeptMachine]],
    kept: Mapping[MachineKey, KeeperState],
    now: float,
) -> KeeperPlan:
    """What to do, given the machines of each host this daemon serves now and what it keeps.

    A machine that runs gets a stream unless it has one or waits for a retry. One that does not
    run has its stream closed and keeps its files (a guest that stopped is when its log matters
    most). One that is no longer among its host's machines (deleted, or moved to another host),
    or whose host is no longer served (the claim was handed back: the next holder keeps its own
    log), is forgotten: its stream closed and its files removed.
    """
    where: dict[MachineKey, tuple[str, KeptMachine]] = {}
    for host, machines in served.items():
        for machine in machines:
            where[machine.key] = (host, machine)
    to_open: list[tuple[str, KeptMachine]] = []
    to_close: list[MachineKey] = []
    to_forget: list[MachineKey] = []
    for key, state in kept.items():
        found = where.get(key)
        if found is None or found[0] != state.host:
            to_forget.append(key)
        elif not found[1].running and (state.open or state.retry_at > 0):
            to_close.append(key)
    for key, (host, machine) in where.items():
        if not machine.running or key in to_forget:
            continue
        held = kept.get(key)
        if held is None or (not held.open and held.retry_at <= now):
            to_open.append((host, machine))
    return KeeperPlan(tuple(to_open), tuple(to_close), tuple(to_forget))


def retry_delay(failures: int) -> float:
    """Seconds before the next try after `failures` (1 or more) failed opens or ended streams
    in a row: doubling from `CONSOLE_KEEPER_RETRY_SECONDS` up to the cap."""
    if failures <= 1:
        return c.CONSOLE_KEEPER_RETRY_SECONDS
    exponent = min(failures - 1, 16)
    delay: float = c.CONSOLE_KEEPER_RETRY_SECONDS * (1 << exponent)
    return min(delay, c.CONSOLE_KEEPER_RETRY_MAX_SECONDS)


def failures_after_end(failures: int, lived_seconds: float) -> int:
    """The failure count once a stream ended: a stream that lived long ended for a new reason
    (the guest rebooted, the connection was lost), so its count starts again."""
    return 1 if lived_seconds >= c.CONSOLE_KEEPER_HEALTHY_SECONDS else failures + 1


# -- rotation --------------------------------------------------------------------------------


def log_files(path: str, rotated: int = c.CONSOLE_LOG_ROTATED) -> list[str]:
    """The files of one log, oldest first: `<path>.<rotated>` ... `<path>.1`, then `<path>`."""
    return [f"{path}.{n}" for n in range(rotated, 0, -1)] + [path]


def fitting(data: bytes, limit: int) -> bytes:
    """What of one chunk a log of `limit` bytes per file can hold: its end, when it is bigger."""
    return data if len(data) <= limit else data[-limit:]


def rotates(size: int, incoming: int, limit: int) -> bool:
    """Whether a file of `size` bytes must be rotated before `incoming` more are written to it
    (an empty file never is: a chunk is cut to the limit first, `fitting`)."""
    return size > 0 and size + incoming > limit


def tail_ranges(sizes: Sequence[int], max_bytes: int) -> list[tuple[int, int, int]]:
    """The last `max_bytes` of the files of one log, whose sizes are given oldest first: the
    (file index, offset, length) to read, oldest first (a missing file counts as empty)."""
    left = max(0, max_bytes)
    ranges: list[tuple[int, int, int]] = []
    for index in range(len(sizes) - 1, -1, -1):
        if left == 0:
            break
        size = max(0, sizes[index])
        if size == 0:
            continue
        take = min(size, left)
        ranges.append((index, size - take, take))
        left -= take
    ranges.reverse()
    return ranges
