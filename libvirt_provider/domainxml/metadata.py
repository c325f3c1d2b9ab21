"""The ownership marker in the domain's `<metadata>`.

It says which LibvirtMachine (namespace, name, uid) and which generic VM the domain belongs to, the
VM's tags, and the digest of the cloud-init inputs it was built with. libvirt keeps elements of a
foreign XML namespace verbatim, so the marker survives redefinition and is how a domain found by
name is proven to be ours (together with the UUID).
"""

from __future__ import annotations

from lxml import etree

from libvirt_provider.constants import METADATA_NAMESPACE, METADATA_PREFIX
from libvirt_provider.resolved import DomainSpec

__all__ = ["MACHINE_TAG", "render_metadata"]

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
