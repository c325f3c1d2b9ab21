"""`LibvirtStorageClass`: how a VM disk's `storageClassName` maps to a libvirt pool on a host.

The object's name is the storage class name. It names the pool (the same on every host, or
overridden per host) and the format of blank disks. An unknown class is a problem to report; an
empty class name means the class marked `default`, and nothing else: no pool is ever guessed.
"""

from __future__ import annotations

from pydantic import Field

from catalog.base import KubeModel, ObjectMeta, VolumeName
from catalog.image import ImageFormat

__all__ = ["LibvirtStorageClass", "LibvirtStorageClassSpec"]


class LibvirtStorageClassSpec(KubeModel):
    """The pool that holds disks of this storage class, and the format of blank disks."""

    pool: VolumeName = Field(description="libvirt storage pool that holds this class's volumes.")
    host_pools: dict[str, VolumeName] = Field(
        default_factory=dict, description="Per-host pool overrides: host name -> pool name."
    )
    volume_format: ImageFormat = Field(
        default=ImageFormat.QCOW2, description="Format of blank data disks: qcow2 or raw."
    )
    default: bool = Field(
        default=False, description="Use this class for disks that name no storage class."
    )

    def pool_on(self, host: str) -> str:
        return self.host_pools.get(host, self.pool)


class LibvirtStorageClass(KubeModel):
    metadata: ObjectMeta
    spec: LibvirtStorageClassSpec
