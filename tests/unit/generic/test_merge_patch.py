"""Status patches are JSON merge patches: what they must say for the server to end up right."""

from __future__ import annotations

from typing import Any

from generic.formats import merge_patch


def _apply(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386, as the API server applies it."""
    result = dict(target)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _apply(result[key], value)
        else:
            result[key] = value
    return result


def test_applying_the_patch_gives_the_desired_status_at_every_depth() -> None:
    current = {
        "ready": True,
        "providerMetadata": {"host": "h", "guestAgent": "connected", "guestKernel": "6.1"},
        "addresses": [{"address": "10.0.0.2"}],
    }
    desired = {
        "ready": False,
        "providerMetadata": {"host": "h", "guestAgent": "disconnected"},
        "powerState": "PoweredOn",
    }
    patch = merge_patch(current, desired)
    assert patch["providerMetadata"] == {"guestAgent": "disconnected", "guestKernel": None}
    assert _apply(current, patch) == desired


def test_an_equal_status_needs_no_patch() -> None:
    status = {"providerMetadata": {"host": "h"}}
    assert merge_patch(status, {"providerMetadata": {"host": "h"}}) is None
