"""Kubernetes' `storage.k8s.io/v1` `VolumeAttributesClass`, as far as this provider reads it.

A disk's `volumeAttributesClassName` names one. The provider honours only classes whose
`driverName` is its own (`libvirt.infrastructure.vm-api.io`); what the `parameters` mean is the
provider's to say (`libvirt_provider/resolve/iotune.py`). The parameters stay text here: a malformed
value is the machine's problem to report, not a reason to ignore the whole class.
"""

from __future__ import annotations

from pydantic import Field

from catalog.base import KubeModel, ObjectMeta

__all__ = ["VolumeAttributesClass"]


class VolumeAttributesClass(KubeModel):
    metadata: ObjectMeta
    driver_name: str = Field(description="The CSI-style driver that honours this class.")
    parameters: dict[str, str] = Field(default_factory=dict)
