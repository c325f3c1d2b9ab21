"""A LibvirtRestore's hold on a machine (`status.restore`), read and written the same way by the
restore and by the machine's controller (pure).

Why a hold rather than a change of the VirtualMachine's `powerState`: the user's spec stays the
user's (a GitOps tool would fight a controller that edits it), and once the hold is released the
machine simply converges back to what its VirtualMachine asks, which is the power state it had
unless the user changed it meanwhile. The machine's own controller does the powering off,
through the same path as any power change (graceful within the machine's shutdown timeout, then
forced), and says it is done by setting `held`; the restore touches the disks only after that,
so no pass of the machine's controller that started before the hold can start the machine
under it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["RestoreHold", "hold_mark", "release_mark", "restore_hold"]


@dataclass(frozen=True)
class RestoreHold:
    restore: str
    uid: str
    since: str
    held: bool


def restore_hold(obj: Mapping[str, Any]) -> RestoreHold | None:
    """The hold a LibvirtMachine's status shows, if any."""
    raw = (obj.get("status") or {}).get("restore")
    if not isinstance(raw, Mapping) or not raw.get("uid"):
        return None
    return RestoreHold(
        restore=str(raw.get("restore") or ""),
        uid=str(raw["uid"]),
        since=str(raw.get("since") or ""),
        held=bool(raw.get("held")),
    )


def hold_mark(restore: str, uid: str, since: str) -> dict[str, Any]:
    """The status patch by which the restore `restore` (uid `uid`) holds the machine off."""
    return {"restore": {"restore": restore, "uid": uid, "since": since, "held": None}}


def release_mark() -> dict[str, Any]:
    """The status patch that releases any hold."""
    return {"restore": None}
