"""What `kubectl vm drain` decides without I/O: the patches it sends to the LibvirtHost, the
lines it prints (the plan, then the progress) and its exit code.

Why its own module: the plugin's shell (`adapters/plugin/drain.py`) only talks to the API
server; the drain is the host's daemon's work (docs/migration.md, "Draining a host").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from libvirt_provider import constants as c

__all__ = [
    "abort_patch",
    "cancel_patch",
    "drain_of",
    "drain_patch",
    "exit_code",
    "plan_lines",
    "progress_line",
    "settled",
]

_ENDED = frozenset({c.DRAIN_PHASE_DRAINED, c.DRAIN_PHASE_BLOCKED})


def drain_patch(*, dry_run: bool, on_cancel: str) -> dict[str, Any]:
    """Cordon and drain in one write (the CRD refuses a drain of a host not cordoned)."""
    return {"spec": {"unschedulable": True, "drain": {"dryRun": dry_run, "onCancel": on_cancel}}}


def abort_patch() -> dict[str, Any]:
    """Before a cancel that aborts: the daemon must have recorded the choice first."""
    return {"spec": {"drain": {"onCancel": c.DRAIN_ON_CANCEL_ABORT}}}


def cancel_patch() -> dict[str, Any]:
    """Clear the drain; the cordon stays (`kubectl patch lvh H --type=merge -p
    '{"spec":{"unschedulable":false}}'` uncordons)."""
    return {"spec": {"drain": None}}


def drain_of(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    drain = ((obj or {}).get("status") or {}).get("drain")
    return drain if isinstance(drain, Mapping) else {}


def settled(obj: Mapping[str, Any] | None, *, dry_run: bool, wait: bool) -> bool:
    """Whether the plugin stops reading: a dry run once its plan is published; a followed drain
    once it is Drained or Blocked; otherwise once the plan is published at all."""
    drain = drain_of(obj)
    phase = drain.get("phase")
    if dry_run:
        return phase == c.DRAIN_PHASE_PLANNED
    if bool(drain.get("dryRun")):
        return False
    if wait:
        return phase in _ENDED
    return phase is not None and phase != c.DRAIN_PHASE_PLANNED


def plan_lines(obj: Mapping[str, Any] | None) -> list[str]:
    """One line per machine of the plan: where it goes, or why it cannot."""
    lines = []
    for m in drain_of(obj).get("machines") or ():
        ref = f"{m.get('namespace')}/{m.get('name')}"
        state = m.get("state")
        if state == c.DRAIN_MACHINE_BLOCKED:
            what = f"blocked: {m.get('reason')}"
        elif m.get("strategy") == c.EVICTION_POWER_OFF:
            what = "power off (stays on the host)"
        elif state in (c.DRAIN_MACHINE_STOPPED, c.DRAIN_MACHINE_GONE):
            what = str(m.get("reason") or state)
        elif m.get("target"):
            what = f"-> {m.get('target')}"
        else:
            what = str(m.get("reason") or state)
        lines.append(f"  {ref} ({m.get('strategy')}, {state}): {what}")
    return lines


def progress_line(obj: Mapping[str, Any] | None) -> str:
    drain = drain_of(obj)
    if not drain:
        return "waiting for the host's daemon to publish the plan"
    return f"{drain.get('phase')}: {drain.get('message')}"


def exit_code(obj: Mapping[str, Any] | None) -> int:
    """0 unless the drain is Blocked."""
    return 1 if drain_of(obj).get("phase") == c.DRAIN_PHASE_BLOCKED else 0
