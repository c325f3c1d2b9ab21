"""What `kubectl vm migrate` decides without I/O: the LibvirtMigration it creates, the lines it
prints while it follows one, and its exit code.

Why its own module: the plugin's shell (`adapters/plugin/migrate.py`) only talks to the API
server; what it sends and what a user reads (a phase, the bytes left, then libvirt's downtime
and elapsed time) is decided here and unit-tested. The migration itself is the daemons' work
(docs/migration.md); the plugin neither waits for it to be possible nor cancels it: leaving
`--wait` (Ctrl-C, the timeout) leaves the migration running, and the message says how to cancel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from libvirt_provider import constants as c

__all__ = [
    "ENDED_PHASES",
    "cancel_hint",
    "exit_code",
    "final_line",
    "human_bytes",
    "migration_body",
    "phase_of",
    "progress_line",
]

# The phases after which nothing changes any more (docs/migration.md, "What the status says").
ENDED_PHASES = frozenset(
    {c.MIGRATION_PHASE_SUCCEEDED, c.MIGRATION_PHASE_FAILED, c.MIGRATION_PHASE_CANCELLED}
)
# Kubernetes appends five characters to a generateName; a name has at most 253.
_NAME_MAX = 253
_GENERATED_SUFFIX = 5


def migration_body(namespace: str, machine: str, target: str | None) -> dict[str, Any]:
    """A LibvirtMigration of `machine` (to `target`, or wherever the source's daemon chooses),
    named by the API server after the machine: `web-x7k2q`."""
    prefix = machine[: _NAME_MAX - _GENERATED_SUFFIX - 1].rstrip("-.") + "-"
    spec: dict[str, Any] = {"machineName": machine}
    if target:
        spec["targetHost"] = target
    return {
        "apiVersion": f"{c.GROUP}/{c.VERSION}",
        "kind": c.MIGRATION_KIND,
        "metadata": {"generateName": prefix, "namespace": namespace},
        "spec": spec,
    }


def human_bytes(count: int) -> str:
    """Bytes as `kubectl top` readers expect them: 1024-based, one decimal above KiB."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{count} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _seconds(milliseconds: Any) -> str:
    return f"{int(milliseconds) / 1000:.1f} s"


def _condition(status: Mapping[str, Any]) -> Mapping[str, Any]:
    for cond in status.get("conditions") or ():
        if cond.get("type") == c.MIGRATION_CONDITION_SUCCEEDED:
            return dict(cond)
    return {}


def phase_of(obj: Mapping[str, Any] | None) -> str:
    """The migration's phase, `Pending` until a daemon wrote one."""
    status = (obj or {}).get("status") or {}
    return str(status.get("phase") or c.MIGRATION_PHASE_PENDING)


def _hosts(status: Mapping[str, Any]) -> str:
    source, target = status.get("source"), status.get("target")
    if source and target:
        return f" {source} -> {target}"
    if target:
        return f" -> {target}"
    return ""


def _remaining(progress: Mapping[str, Any], what: str) -> str | None:
    total, left = progress.get(f"{what}Total"), progress.get(f"{what}Remaining")
    if not total or left is None:  # libvirt reports 0 of 0 before that part of the copy starts
        return None
    return f"{what} {human_bytes(int(left))} of {human_bytes(int(total))} left"


def progress_line(obj: Mapping[str, Any] | None) -> str:
    """One line for the migration's state now: its phase and hosts, while it copies the bytes
    left (memory, then disk), the memory passes and the time so far; otherwise the reason."""
    status = (obj or {}).get("status") or {}
    phase = phase_of(obj)
    line = f"{phase}{_hosts(status)}"
    progress = status.get("progress") or {}
    if phase == c.MIGRATION_PHASE_MIGRATING and progress:
        parts = [x for x in (_remaining(progress, "memory"), _remaining(progress, "disk")) if x]
        if progress.get("iterations"):
            parts.append(f"pass {progress['iterations']}")
        if progress.get("elapsedMilliseconds") is not None:
            parts.append(_seconds(progress["elapsedMilliseconds"]))
        if parts:
            return f"{line}: " + ", ".join(parts)
    reason = _condition(status).get("reason")
    return f"{line} ({reason})" if reason else line


def final_line(obj: Mapping[str, Any] | None) -> str:
    """The last line: what libvirt measured of a successful move, or why it did not happen."""
    status = (obj or {}).get("status") or {}
    phase = phase_of(obj)
    line = f"{phase}{_hosts(status)}"
    if phase == c.MIGRATION_PHASE_SUCCEEDED:
        result = status.get("result") or {}
        parts = []
        if result.get("downtimeMilliseconds") is not None:
            parts.append(f"downtime {int(result['downtimeMilliseconds'])} ms")
        if result.get("elapsedMilliseconds") is not None:
            parts.append(f"elapsed {_seconds(result['elapsedMilliseconds'])}")
        return f"{line}: " + ", ".join(parts) if parts else line
    cond = _condition(status)
    reason, message = cond.get("reason"), cond.get("message")
    if reason and message:
        return f"{line}: {reason}: {message}"
    return f"{line}: {reason}" if reason else line


def exit_code(phase: str) -> int:
    """0 only for a migration that succeeded."""
    return 0 if phase == c.MIGRATION_PHASE_SUCCEEDED else 1


def cancel_hint(namespace: str, name: str) -> str:
    """What a user who stopped waiting reads: the migration goes on, and how to cancel it."""
    short = c.MIGRATION_SHORT_NAMES[0]
    return (
        f"migration {namespace}/{name} goes on; `kubectl get {short} {name} -n {namespace}` "
        f"shows it, `kubectl delete {short} {name} -n {namespace}` cancels it"
    )
