"""Guest facts for the LibvirtMachine's status, from what the qemu guest agent reported (pure).

The agent is the only source that knows the guest from inside: its OS, kernel and own host name.
They are reported in `status.providerMetadata` next to the host and domain, under `guest*` keys,
while the domain runs: `guestAgent` is the agent channel's state (`connected` or `disconnected`)
whenever the domain has a channel, and the others appear only when a connected agent gave them.
Without a channel, or while the domain is off, no `guest*` key is written: absent, never stale.
The values are the guest's own words, so they are bounded and never trusted for anything else.
"""

from __future__ import annotations

from libvirt_provider.driver.types import GuestInfo

__all__ = ["GUEST_FACT_KEYS", "guest_metadata"]

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
