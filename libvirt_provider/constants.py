"""Names of the `infrastructure.vm-api.io` API group as this provider uses them.

The group and version come from the catalog (the lower layer) so they are spelled once. Everything
here is specific to the libvirt provider: its finalizer, labels, annotations, condition reasons of
its own and the XML namespace of the ownership marker it writes into each domain's `<metadata>`.
Reasons defined by the vm-api.io contract (UnsupportedByProvider, RequiresPowerOff, ...) live in
`generic.constants` and are not repeated here.
"""

from __future__ import annotations

from typing import Final

from catalog.constants import (
    GROUP,
    IMAGE_KIND,
    IMAGE_PLURAL,
    MACHINE_CLASS_KIND,
    MACHINE_CLASS_PLURAL,
    NETWORK_KIND,
    NETWORK_PLURAL,
    STORAGE_CLASS_KIND,
    STORAGE_CLASS_PLURAL,
    VERSION,
)

__all__ = [
    "DEFAULT_SHUTDOWN_TIMEOUT_SECONDS",
    "FINALIZER",
    "GROUP",
    "HOST_LABEL",
    "IMAGE_KIND",
    "IMAGE_PLURAL",
    "MACHINE_CLASS_KIND",
    "MACHINE_CLASS_PLURAL",
    "MACHINE_KIND",
    "MACHINE_PLURAL",
    "MACHINE_SHORT_NAMES",
    "METADATA_NAMESPACE",
    "METADATA_PREFIX",
    "NETWORK_KIND",
    "NETWORK_PLURAL",
    "REASON_AMBIGUOUS_DEFAULT",
    "REASON_INVALID_SPEC",
    "REASON_NOT_AVAILABLE_ON_HOST",
    "REASON_REFERENCE_NOT_FOUND",
    "REASON_SECRET_NOT_FOUND",
    "STORAGE_CLASS_KIND",
    "STORAGE_CLASS_PLURAL",
    "VERSION",
    "VM_API_CRD_LABEL",
    "VM_API_CRD_LABEL_VALUE",
]

MACHINE_KIND: Final = "LibvirtMachine"
MACHINE_PLURAL: Final = "libvirtmachines"
MACHINE_SHORT_NAMES: Final = ("lvm", "lvms")

FINALIZER: Final = f"{GROUP}/libvirt-machine"

# Machines are sharded by host: each daemon watches only the machines labelled with its host.
HOST_LABEL: Final = f"{GROUP}/host"

# The contract's marker on provider CRDs: the generic controller finds provider kinds through it.
VM_API_CRD_LABEL: Final = "vm-api.io/v1alpha1"
VM_API_CRD_LABEL_VALUE: Final = "v1alpha1"

# Ownership marker inside a domain's <metadata>: libvirt keeps foreign-namespaced elements verbatim.
METADATA_NAMESPACE: Final = "https://infrastructure.vm-api.io/libvirt-machine/v1alpha1"
METADATA_PREFIX: Final = "vmapi"

DEFAULT_SHUTDOWN_TIMEOUT_SECONDS: Final = 120

# Condition reasons of this provider (the contract copies a provider's own reason verbatim).
REASON_REFERENCE_NOT_FOUND: Final = "ReferenceNotFound"
REASON_AMBIGUOUS_DEFAULT: Final = "AmbiguousDefault"
REASON_INVALID_SPEC: Final = "InvalidSpec"
REASON_SECRET_NOT_FOUND: Final = "SecretNotFound"
REASON_NOT_AVAILABLE_ON_HOST: Final = "NotAvailableOnHost"
