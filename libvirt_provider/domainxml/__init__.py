"""Libvirt domain XML, both ways: rendered from a resolved `DomainSpec`, read back, compared.

One module per area of the document (`identity`, `metadata`, `compute`, `firmware`, `disks`,
`cloudinit`, `nics`, `console`), each knowing its elements in both directions: how to write them
from the resolved model, how to read back the fields it owns from libvirt's version of the
document, and which of their differences a running domain takes at once. `domain` assembles the
areas; `changes` names every difference with a typed key; `live_update` turns the live ones into
libvirt steps.

The tree is built with lxml, never by string concatenation, so every value is escaped by
construction. Nothing here invents what libvirt knows better: no PCI addresses, no firmware paths,
no emulator path. libvirt fills those in, and the parsers ignore them.
"""

from __future__ import annotations

from libvirt_provider.domainxml.changes import (
    Change,
    ChangeKey,
    DeviceAction,
    DeviceEdit,
    DeviceKind,
    DomainDiff,
    Setting,
)
from libvirt_provider.domainxml.disks import DISK_ALIAS_PREFIX, pool_volumes
from libvirt_provider.domainxml.domain import (
    OwnedFields,
    diff_owned,
    differences,
    owned_fields,
    render_domain,
    render_domain_xml,
)
from libvirt_provider.domainxml.live_update import (
    AttachDevice,
    DetachDevice,
    LivePlan,
    LiveStep,
    SetBlockIoTune,
    SetMemory,
    SetMetadata,
    SetVcpus,
    plan_live_update,
)
from libvirt_provider.domainxml.metadata import OwnerMarker, owner_marker
from libvirt_provider.domainxml.nics import interface_macs

__all__ = [
    "DISK_ALIAS_PREFIX",
    "AttachDevice",
    "Change",
    "ChangeKey",
    "DetachDevice",
    "DeviceAction",
    "DeviceEdit",
    "DeviceKind",
    "DomainDiff",
    "LivePlan",
    "LiveStep",
    "OwnedFields",
    "OwnerMarker",
    "SetBlockIoTune",
    "SetMemory",
    "SetMetadata",
    "SetVcpus",
    "Setting",
    "diff_owned",
    "differences",
    "interface_macs",
    "owned_fields",
    "owner_marker",
    "plan_live_update",
    "pool_volumes",
    "render_domain",
    "render_domain_xml",
]
