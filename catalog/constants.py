"""Names of the `infrastructure.vm-api.io` API group that the catalog kinds live in.

One fact, one place: the provider package re-exports these rather than spelling them again, because
the catalog must not import the provider (it is the lower layer).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CATALOG_PLURALS",
    "GROUP",
    "IMAGE_KIND",
    "IMAGE_PLURAL",
    "MACHINE_CLASS_KIND",
    "MACHINE_CLASS_PLURAL",
    "NETWORK_KIND",
    "NETWORK_PLURAL",
    "SNAPSHOT_PLURAL",
    "STORAGE_CLASS_KIND",
    "STORAGE_CLASS_PLURAL",
    "VERSION",
    "VOLUME_ATTRIBUTES_CLASS_GROUP",
    "VOLUME_ATTRIBUTES_CLASS_KIND",
    "VOLUME_ATTRIBUTES_CLASS_PLURAL",
    "VOLUME_ATTRIBUTES_CLASS_VERSION",
    "WATCHED_KINDS",
]

GROUP: Final = "infrastructure.vm-api.io"
VERSION: Final = "v1alpha1"

IMAGE_KIND: Final = "LibvirtImage"
MACHINE_CLASS_KIND: Final = "LibvirtMachineClass"
NETWORK_KIND: Final = "LibvirtNetwork"
STORAGE_CLASS_KIND: Final = "LibvirtStorageClass"

IMAGE_PLURAL: Final = "libvirtimages"
MACHINE_CLASS_PLURAL: Final = "libvirtmachineclasses"
NETWORK_PLURAL: Final = "libvirtnetworks"
STORAGE_CLASS_PLURAL: Final = "libvirtstorageclasses"
# The provider's LibvirtSnapshot: a disk may start from one (`source.snapshot`), so machines read
# it like a catalog object (in their own namespace only) and are woken by its changes.
SNAPSHOT_PLURAL: Final = "libvirtsnapshots"
CATALOG_PLURALS: Final = (IMAGE_PLURAL, MACHINE_CLASS_PLURAL, NETWORK_PLURAL, STORAGE_CLASS_PLURAL)

# Kubernetes' own VolumeAttributesClass (GA in 1.34): a disk's volumeAttributesClassName names one,
# and the daemon reads it like a catalog object, from its own API group.
VOLUME_ATTRIBUTES_CLASS_GROUP: Final = "storage.k8s.io"
VOLUME_ATTRIBUTES_CLASS_VERSION: Final = "v1"
VOLUME_ATTRIBUTES_CLASS_KIND: Final = "VolumeAttributesClass"
VOLUME_ATTRIBUTES_CLASS_PLURAL: Final = "volumeattributesclasses"

WATCHED_KINDS: Final = {
    **{plural: (GROUP, VERSION) for plural in CATALOG_PLURALS},
    SNAPSHOT_PLURAL: (GROUP, VERSION),
    VOLUME_ATTRIBUTES_CLASS_PLURAL: (
        VOLUME_ATTRIBUTES_CLASS_GROUP,
        VOLUME_ATTRIBUTES_CLASS_VERSION,
    ),
}
"""Every kind a machine's resolution reads by name, plural -> (group, version): each is watched,
and a change of one wakes the machines."""
