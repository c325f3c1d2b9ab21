"""The whole document: the areas assembled, in both directions, and compared.

Rendering puts the areas into one `<domain>` element in the order `virsh dumpxml` shows them; it
owns the element tree, and each area only appends its own elements to the parent it is given, so
no area can reach into another's part of the document.

Reading back is needed because libvirt returns far more than was written: PCI addresses,
controllers, emulator and firmware paths, machine types expanded to a version, memory in KiB, MACs
and targets it chose. Comparing documents would report all of that as drift. So both the desired
and the observed XML go through the same parsers, each area keeping only what it renders,
normalised; everything else is libvirt's and is ignored on purpose, as are unknown elements (a
round trip must not fight libvirt's defaults). Each area then says which of its differences a
running domain takes at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lxml import etree

from libvirt_provider.domainxml.changes import DomainDiff
from libvirt_provider.domainxml.cloudinit import (
    compare_cloud_init_media,
    parse_cloud_init_media,
    render_cloud_init,
)
from libvirt_provider.domainxml.compute import (
    ComputeFacts,
    compare_compute,
    parse_compute,
    render_cpu,
    render_memory,
)
from libvirt_provider.domainxml.console import (
    ConsoleFacts,
    compare_console,
    parse_console,
    render_console,
    render_guest_agent,
)
from libvirt_provider.domainxml.disks import (
    DiskFacts,
    compare_disks,
    needs_scsi_controller,
    parse_disks,
    render_disk,
    render_scsi_controller,
)
from libvirt_provider.domainxml.firmware import (
    FirmwareFacts,
    compare_firmware,
    parse_firmware,
    render_features,
    render_os,
)
from libvirt_provider.domainxml.identity import (
    IdentityFacts,
    compare_identity,
    parse_identity,
    render_identity,
    render_lifecycle,
)
from libvirt_provider.domainxml.metadata import (
    OwnershipFacts,
    compare_ownership,
    parse_ownership,
    render_metadata,
)
from libvirt_provider.domainxml.nics import (
    NicFacts,
    compare_interfaces,
    parse_interfaces,
    render_interface,
)
from libvirt_provider.resolved import DomainSpec

__all__ = [
    "OwnedFields",
    "diff_owned",
    "differences",
    "owned_fields",
    "render_domain",
    "render_domain_xml",
]


def render_domain(spec: DomainSpec) -> etree._Element:
    """The `<domain>` element for `spec`; a pure function of its input."""
    domain = render_identity(spec)
    render_metadata(domain, spec)
    render_memory(domain, spec.memory)
    render_cpu(domain, spec.cpu)
    render_os(domain, spec.os)
    render_features(domain, spec.os)
    render_lifecycle(domain)

    devices = etree.SubElement(domain, "devices")
    for disk in spec.disks:
        render_disk(devices, disk)
    if spec.cloud_init is not None:
        render_cloud_init(devices, spec.cloud_init)
    if needs_scsi_controller(spec):
        render_scsi_controller(devices)
    for nic in spec.interfaces:
        render_interface(devices, nic)
    render_console(devices, spec.console)
    if spec.needs_guest_agent:
        render_guest_agent(devices)
    return domain


def render_domain_xml(spec: DomainSpec) -> str:
    """`render_domain` serialised, indented for humans and golden-file diffs."""
    element = render_domain(spec)
    etree.indent(element, space="  ")
    return etree.tostring(element, encoding="unicode") + "\n"


@dataclass(frozen=True)
class OwnedFields:
    """What the renderer writes, read back area by area as comparable values."""

    identity: IdentityFacts
    ownership: OwnershipFacts
    compute: ComputeFacts
    firmware: FirmwareFacts
    disks: Mapping[str, DiskFacts]
    cloud_init: DiskFacts | None
    interfaces: Mapping[str, NicFacts]
    console: ConsoleFacts


def owned_fields(xml: str | bytes | etree._Element) -> OwnedFields:
    """Parse domain XML (ours or libvirt's version of it) into the fields this provider owns."""
    root = etree.fromstring(xml) if isinstance(xml, str | bytes) else xml
    return OwnedFields(
        identity=parse_identity(root),
        ownership=parse_ownership(root),
        compute=parse_compute(root),
        firmware=parse_firmware(root),
        disks=parse_disks(root),
        cloud_init=parse_cloud_init_media(root),
        interfaces=parse_interfaces(root),
        console=parse_console(root),
    )


def diff_owned(desired: OwnedFields, observed: OwnedFields) -> DomainDiff:
    """What must change for `observed` to match `desired`, each change marked live or not."""
    return DomainDiff.of(
        [
            *compare_identity(desired.identity, observed.identity),
            *compare_ownership(desired.ownership, observed.ownership),
            *compare_compute(
                desired.compute,
                observed.compute,
                observed_domain_type=observed.identity.domain_type,
            ),
            *compare_firmware(desired.firmware, observed.firmware),
            *compare_disks(desired.disks, observed.disks),
            *compare_cloud_init_media(desired.cloud_init, observed.cloud_init),
            *compare_interfaces(desired.interfaces, observed.interfaces),
            *compare_console(desired.console, observed.console),
        ]
    )


def differences(current: str, desired: str) -> list[str]:
    """Readable differences between a domain's current (inactive) XML and the desired XML;
    empty when the domain is up to date in every field this provider owns."""
    return diff_owned(owned_fields(desired), owned_fields(current)).describe()
