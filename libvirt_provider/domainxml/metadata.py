"""The ownership marker in the domain's `<metadata>`.

It says which LibvirtMachine (namespace, name, uid) and which generic VM the domain belongs to, the
VM's tags, and the digest of the cloud-init inputs it was built with. libvirt keeps elements of a
foreign XML namespace verbatim, so the marker survives redefinition and is how a domain found by
name is proven to be ours (together with the UUID).

The marker and the tags change on a running domain (libvirt's setMetadata); the digest waits for the
power cycle that gives the guest the media it describes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lxml import etree

from libvirt_provider.constants import METADATA_NAMESPACE, METADATA_PREFIX
from libvirt_provider.domainxml.changes import Change, Compared, Setting, compare
from libvirt_provider.resolved import DomainSpec

__all__ = [
    "MACHINE_TAG",
    "OwnerMarker",
    "OwnershipFacts",
    "compare_ownership",
    "marker_element",
    "owner_marker",
    "parse_ownership",
    "render_metadata",
]

MACHINE_TAG = f"{{{METADATA_NAMESPACE}}}machine"
_TAG_TAG = f"{{{METADATA_NAMESPACE}}}tag"
_CIDATA_TAG = f"{{{METADATA_NAMESPACE}}}cloudInit"


def render_metadata(domain: etree._Element, spec: DomainSpec) -> None:
    owner = spec.owner
    metadata = etree.SubElement(domain, "metadata")
    machine = etree.SubElement(
        metadata,
        MACHINE_TAG,
        nsmap={METADATA_PREFIX: METADATA_NAMESPACE},
        namespace=owner.namespace,
        name=owner.name,
        uid=str(owner.uid),
        virtualMachine=owner.virtual_machine,
    )
    for key, value in sorted(owner.tags.items()):
        etree.SubElement(machine, _TAG_TAG, key=key, value=value)
    if spec.cloud_init is not None:
        etree.SubElement(machine, _CIDATA_TAG, digest=spec.cloud_init.digest)


@dataclass(frozen=True)
class OwnerMarker:
    """The ownership marker from `<metadata>`: which LibvirtMachine this domain belongs to."""

    namespace: str
    name: str
    uid: str
    virtual_machine: str


@dataclass(frozen=True)
class OwnershipFacts:
    owner: OwnerMarker | None
    tags: Mapping[str, str]
    cloud_init_digest: str | None


def marker_element(root: etree._Element) -> etree._Element | None:
    """The whole marker element (owner, tags, cloud-init digest), as one metadata write sets it."""
    return root.find(f"metadata/{MACHINE_TAG}")


def owner_marker(root: etree._Element) -> OwnerMarker | None:
    """The ownership marker of a parsed domain, or None when the domain is not ours."""
    machine = marker_element(root)
    if machine is None:
        return None
    values = [machine.get(k) for k in ("namespace", "name", "uid", "virtualMachine")]
    if any(v is None for v in values):
        return None
    namespace, name, uid, vm = (str(v) for v in values)
    return OwnerMarker(namespace=namespace, name=name, uid=uid, virtual_machine=vm)


def parse_ownership(root: etree._Element) -> OwnershipFacts:
    machine = marker_element(root)
    if machine is None:
        return OwnershipFacts(owner=None, tags={}, cloud_init_digest=None)
    cloud_init = machine.find(_CIDATA_TAG)
    return OwnershipFacts(
        owner=owner_marker(root),
        tags={tag.get("key") or "": tag.get("value") or "" for tag in machine.findall(_TAG_TAG)},
        cloud_init_digest=cloud_init.get("digest") if cloud_init is not None else None,
    )


_COMPARED: tuple[Compared[OwnershipFacts], ...] = (
    Compared(Setting.CLOUD_INIT_DATA, lambda f: f.cloud_init_digest),
    Compared(Setting.OWNERSHIP_MARKER, lambda f: f.owner, live=True),
    Compared(Setting.TAGS, lambda f: dict(f.tags), live=True),
)


def compare_ownership(desired: OwnershipFacts, observed: OwnershipFacts) -> list[Change]:
    return compare(desired, observed, _COMPARED)
