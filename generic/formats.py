"""Small pure helpers both controllers share: API timestamps, merge patches, validation messages.

Each existed two or three times; these are the one copy.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

__all__ = [
    "TIME_FORMAT",
    "format_time",
    "merge_patch",
    "parse_micro_time",
    "parse_time",
    "utc_now",
    "validation_details",
    "validation_message",
]

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
"""Kubernetes' timestamp format (RFC 3339, UTC, whole seconds), as conditions and Events use."""


def format_time(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime(TIME_FORMAT)


def utc_now() -> str:
    return format_time(dt.datetime.now(dt.UTC))


def parse_time(text: object) -> dt.datetime | None:
    """A timestamp written by `format_time`; None for anything else."""
    if not isinstance(text, str):
        return None
    try:
        return dt.datetime.strptime(text, TIME_FORMAT).replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def parse_micro_time(text: object) -> dt.datetime | None:
    """A MicroTime (a Lease's renewTime: RFC 3339 with microseconds, "Z" or an offset) as an aware
    datetime; None for anything else. A time without an offset (the API server writes none) is
    taken as UTC."""
    if not isinstance(text, str):
        return None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def merge_patch(current: object, desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON merge patch (RFC 7386) turning `current` into `desired`, or None when they are
    equal (no write is needed)."""
    now = current if isinstance(current, Mapping) else {}
    if now == desired:
        return None
    return _merge_patch(now, desired)


def _merge_patch(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    # A merge patch merges objects key by key at every depth, so a key that left a nested map
    # (say providerMetadata's guest facts) must be sent as null there too, or the server keeps it.
    patch: dict[str, Any] = {key: None for key in current if key not in desired}
    for key, value in desired.items():
        old = current.get(key)
        if old == value:
            continue
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            patch[key] = _merge_patch(old, value)
        else:
            patch[key] = value
    return patch


def validation_details(error: ValidationError, where: str = "") -> list[tuple[str, str]]:
    """(field path, message) per problem pydantic found. The rejected value itself is left out
    on purpose: it may be a secret, or huge."""
    details = []
    for detail in error.errors(include_input=False, include_url=False):
        path = ".".join(str(part) for part in detail["loc"])
        details.append((f"{where}.{path}" if where and path else where or path, detail["msg"]))
    return details


def validation_message(kind: str, error: ValidationError, *, limit: int = 5) -> str:
    """One readable line for a condition or an Event: the first `limit` problems."""
    parts = [f"{path}: {message}" for path, message in validation_details(error)[:limit]]
    return f"invalid {kind}: " + "; ".join(parts)
