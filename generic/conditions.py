"""Condition bookkeeping for the generic VM: lastTransitionTime moves only when status changes.

Conditions of types this controller does not own are left exactly as found.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from generic import constants as c

__all__ = ["OWNED_TYPES", "DesiredCondition", "find_condition", "merge_conditions"]

OWNED_TYPES = (c.CONDITION_READY, c.CONDITION_INFRASTRUCTURE_READY, c.CONDITION_UP_TO_DATE)


@dataclass(frozen=True)
class DesiredCondition:
    """What a condition should say now; the transition time is worked out by merging."""

    type: str
    status: str
    reason: str
    message: str


def find_condition(conditions: object, type_: str) -> Mapping[str, Any] | None:
    """The condition of `type_` in a raw conditions list, tolerating garbage."""
    if not isinstance(conditions, list):
        return None
    for item in conditions:
        if isinstance(item, dict) and item.get("type") == type_:
            return item
    return None


def merge_conditions(
    current: object,
    desired: Iterable[DesiredCondition],
    *,
    generation: int | None,
    now: str,
) -> list[dict[str, Any]]:
    """The new conditions list: owned types as `desired` says (absent ones dropped), others kept.

    An owned condition keeps its lastTransitionTime when its status is unchanged, even if its
    reason or message changed.
    """
    wanted = {d.type: d for d in desired}
    merged: list[dict[str, Any]] = []
    existing: Sequence[Any] = current if isinstance(current, list) else []
    for item in existing:
        if isinstance(item, dict) and item.get("type") not in OWNED_TYPES:
            merged.append(dict(item))
    for type_ in OWNED_TYPES:
        want = wanted.get(type_)
        if want is None:
            continue
        before = find_condition(existing, type_)
        since = now
        if before is not None and before.get("status") == want.status:
            since = str(before.get("lastTransitionTime") or now)
        condition: dict[str, Any] = {
            "type": want.type,
            "status": want.status,
            "reason": want.reason,
            "message": want.message,
            "lastTransitionTime": since,
        }
        if generation is not None:
            condition["observedGeneration"] = generation
        merged.append(condition)
    return merged
