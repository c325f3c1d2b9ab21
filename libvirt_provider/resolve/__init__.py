"""The resolver: generic VM + LibvirtMachine + catalog + Secret data + host facts -> a machine.

Pure and total: it either returns a fully resolved machine or every problem it found, each with
the condition reason it maps to. `UnsupportedByProvider` (from the vm-api.io contract) marks what
this provider cannot honour at all, the list in `refusals` (shown in docs/catalog.md). The
provider's own reasons mark what the
user can fix: a reference that resolves to nothing, an ambiguous default, an invalid combination,
a missing Secret or key, something this host does not offer.

It never ignores a requested field: each one is either used or reported. It never puts Secret
contents into a problem message: only Secret names and keys.

One module per area, all working on one `Context` that collects problems:
`compute` (placement, domain type, size), `storage` (images, pools, disks, their
VolumeAttributesClasses), `iotune` (a class's parameters as I/O limits), `network` (NICs and
their guest configuration), `bootstrap` (cloud-init), `machine` (firmware, assembly, entry point),
`refusals` (what is refused, and why).
"""

from __future__ import annotations

from libvirt_provider.resolve.context import HostOffer, Problem, Resolution, SecretData
from libvirt_provider.resolve.machine import resolve_machine

__all__ = ["HostOffer", "Problem", "Resolution", "SecretData", "resolve_machine"]
