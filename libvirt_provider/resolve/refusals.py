"""Every portable field this provider refuses, and why: the one list of `UnsupportedByProvider`.

A field lands here only when libvirt truly cannot honour it; everything else in the portable API
has a meaning on a libvirt fleet. The resolver's messages are these texts (some name the object
they are about), and docs/catalog.md ("What this provider refuses") shows the same list; a unit
test keeps the two identical, so the documentation can never promise or deny more than the code.
"""

from __future__ import annotations

from typing import Final

__all__ = ["NO_BOOT_DISK", "NO_POOL", "OTHER_REFERENCE", "REFUSALS"]

NO_BOOT_DISK: Final = "a VM without a bootDisk cannot boot on this provider"
NO_POOL: Final = (
    "LibvirtNetwork {network!r} declares no addressPool, so it has no public IP addresses to "
    "hand out"
)
OTHER_REFERENCE: Final = (
    "the libvirt provider resolves this reference only to {kind}.{group}, not to "
    "{other_kind}.{other_group}"
)
REFUSALS: Final[dict[str, str]] = {
    "bootDisk": NO_BOOT_DISK,
    "network.interfaces[].publicIP on a network without an addressPool": NO_POOL,
    "a reference to another group or kind (image, class, network, storage class, snapshot)": (
        OTHER_REFERENCE
    ),
}
"""What is refused (the field, or the case) -> the resolver's message, placeholders in braces."""
