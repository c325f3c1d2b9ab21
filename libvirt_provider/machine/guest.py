"""Guest facts for the LibvirtMachine's status, from what the qemu guest agent reported (pure).

The agent is the only source that knows the guest from inside: its OS, kernel and own host name.
They are reported in `status.providerMetadata` next to the host and domain, under `guest*` keys,
while the domain runs: `guestAgent` is the agent channel's state (`connected` or `disconnected`)
whenever the domain has a channel (`unresponsive` while an agent that timed out is backed off,
`machine/agent_backoff.py`), and the others appear only when a connected agent gave them.
Without a channel, or while the domain is off, no `guest*` key is written: absent, never stale.
The values are the guest's own words, so they are bounded and never trusted for anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from libvirt_provider.driver.types import GuestInfo

__all__ = ["AGENT_UNRESPONSIVE", "GUEST_FACT_KEYS", "guest_metadata", "reported_guest_metadata"]

# `guestAgent` of a machine whose agent took its channel and did not answer in time.
AGENT_UNRESPONSIVE = "unresponsive"

# libvirt guest-info key -> providerMetadata key
GUEST_FACT_KEYS: dict[str, str] = {
    "os.name": "guestOSName",
    "os.version": "guestOSVersion",
    "os.kernel-release": "guestKernel",
    "hostname": "guestHostName",
}
_MAX_VALUE = 256


def guest_metadata(info: GuestInfo | None, *, running: bool) -> dict[str, str]:
    """The `guest*` providerMetadata entries for a domain's agent report."""
    if info is None or not running:
        return {}
    found = {"guestAgent": info.agent}
    for source, key in GUEST_FACT_KEYS.items():
        value = (info.facts.get(source) or "").strip()
        if value:
            found[key] = value[:_MAX_VALUE]
    return found


def reported_guest_metadata(status: Mapping[str, Any]) -> dict[str, str]:
    """The `guest*` entries the machine's status holds now (kept while the agent is not asked)."""
    meta = status.get("providerMetadata") or {}
    if not isinstance(meta, Mapping):
        return {}
    keys = {"guestAgent", *GUEST_FACT_KEYS.values()}
    return {k: str(v) for k, v in meta.items() if k in keys and isinstance(v, str)}
