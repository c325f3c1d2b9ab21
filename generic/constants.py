"""Every name of the vm-api.io/v1alpha1 API that more than one module (or process) must agree on.

The provider side imports these too, so a reason, finalizer or annotation key is spelled once.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "vm-api.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "VirtualMachine"
PLURAL: Final = "virtualmachines"
SINGULAR: Final = "virtualmachine"
SHORT_NAMES: Final = ("vm", "vms")
CATEGORY: Final = "vm-api"
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

FINALIZER: Final = "vm-api.io/virtualmachine"
"""Held on every generic VM until its adopted provider object is gone."""

LINK_ANNOTATION: Final = "vm-api.io/virtual-machine"
"""Set by the user on the provider object; its value names the generic VM (same namespace)."""

PROVIDER_CRD_LABEL: Final = "vm-api.io/v1alpha1"
"""Providers label their CRD with this key and PROVIDER_CRD_LABEL_VALUE to be watched."""
PROVIDER_CRD_LABEL_VALUE: Final = "v1alpha1"

KEPT_LABELS: Final = (PROVIDER_CRD_LABEL,)
KEPT_ANNOTATIONS: Final = (LINK_ANNOTATION,)
"""The only labels and annotations the generic controller reads of what it watches (VMs, provider
objects, CRDs): everything else a tenant writes there is dropped before it is decoded
(`generic.lean`), so that it cannot grow the leader's memory."""
LEAN_KINDS: Final = (KIND,)
"""The kinds whose watch events the generic controller decodes lean (`generic.lean`)."""

CONTROLLER_NAME: Final = "vm-api-generic-controller"
"""Reported as the source of Kubernetes Events."""

KOPF_PREFIX: Final = "generic.vm-api.io"
"""Prefix for kopf's own finalizer and annotations when the generic controller runs alone."""

# Condition types of the generic VM (and of the provider status contract).
CONDITION_READY: Final = "Ready"
CONDITION_INFRASTRUCTURE_READY: Final = "InfrastructureReady"
CONDITION_UP_TO_DATE: Final = "UpToDate"

# Condition statuses (metav1.ConditionStatus).
STATUS_TRUE: Final = "True"
STATUS_FALSE: Final = "False"
STATUS_UNKNOWN: Final = "Unknown"

# Reasons defined by the API, for providers to report.
REASON_REQUIRES_POWER_OFF: Final = "RequiresPowerOff"
REASON_UNSUPPORTED_BY_PROVIDER: Final = "UnsupportedByProvider"
REASON_WAITING_FOR_CAPACITY: Final = "WaitingForCapacity"
REASON_RATE_LIMITED: Final = "RateLimited"
REASON_PREEMPTED: Final = "Preempted"
REASON_PROVIDER_ERROR: Final = "ProviderError"

# Reasons written by the generic controller itself.
REASON_NOT_ADOPTED: Final = "NotAdopted"
REASON_WAITING: Final = "Waiting"
REASON_REPORTED: Final = "Reported"
REASON_INVALID_PROVIDER_STATUS: Final = "InvalidProviderStatus"
"""The provider object's status breaks the contract (a wrong type at a contract path)."""
REASON_DELETING: Final = "Deleting"

MISSING_PROVIDER_GRACE_SECONDS: Final = 10.0
"""How long a new VM's provider object may be missing before it is a problem (NotAdopted and a
Warning): `kubectl apply` of a VM and its provider object writes them one after the other, and
the VM's first pass may come between the two."""

API_REASONS: Final = frozenset(
    {
        REASON_REQUIRES_POWER_OFF,
        REASON_UNSUPPORTED_BY_PROVIDER,
        REASON_WAITING_FOR_CAPACITY,
        REASON_RATE_LIMITED,
        REASON_PREEMPTED,
        REASON_PROVIDER_ERROR,
    }
)

GENERIC_PROBLEM_REASONS: Final = frozenset({REASON_NOT_ADOPTED, REASON_INVALID_PROVIDER_STATUS})
"""Reasons of this controller's own that are problems: posted as Warning Events."""

TERMINAL_REASONS: Final = frozenset(
    {REASON_UNSUPPORTED_BY_PROVIDER, REASON_PROVIDER_ERROR, REASON_PREEMPTED}
)
"""Provider reasons that need a human: mirrored into status.failureReason/failureMessage."""

# Power states (spec.powerState; providers report the same names in status.powerState).
POWERED_ON: Final = "PoweredOn"
POWERED_OFF: Final = "PoweredOff"
SUSPENDED: Final = "Suspended"

# Power-off modes (spec.powerOffMode).
POWER_OFF_HARD: Final = "Hard"
POWER_OFF_SOFT: Final = "Soft"
POWER_OFF_TRY_SOFT: Final = "TrySoft"

# Address types (status.addresses[].type).
ADDRESS_INTERNAL_IP: Final = "InternalIP"
ADDRESS_EXTERNAL_IP: Final = "ExternalIP"
ADDRESS_INTERNAL_DNS: Final = "InternalDNS"
ADDRESS_EXTERNAL_DNS: Final = "ExternalDNS"
ADDRESS_TYPES: Final = (
    ADDRESS_INTERNAL_IP,
    ADDRESS_EXTERNAL_IP,
    ADDRESS_INTERNAL_DNS,
    ADDRESS_EXTERNAL_DNS,
)

# Kubernetes Event reasons emitted by the generic controller (not condition reasons).
EVENT_FINALIZER_ADDED: Final = "FinalizerAdded"
EVENT_ADOPTED: Final = "Adopted"
EVENT_NOT_ADOPTED: Final = "NotAdopted"
EVENT_DISOWNED: Final = "Disowned"
EVENT_PROVIDER_KIND_UNKNOWN: Final = "ProviderKindUnknown"
EVENT_INVALID_PROVIDER_STATUS: Final = "InvalidProviderStatus"
EVENT_READY: Final = "Ready"
EVENT_NOT_READY: Final = "NotReady"
EVENT_DELETING_INFRASTRUCTURE: Final = "DeletingInfrastructure"
EVENT_INFRASTRUCTURE_DELETED: Final = "InfrastructureDeleted"
EVENT_INFRASTRUCTURE_LEFT: Final = "InfrastructureLeftInPlace"
EVENT_RECONCILE_FAILED: Final = "ReconcileFailed"

# Validation patterns shared by the models and the CRD.
DNS_SUBDOMAIN_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
KIND_PATTERN: Final = r"^[A-Za-z][A-Za-z0-9]*$"
SECRET_KEY_PATTERN: Final = r"^[-._a-zA-Z0-9]+$"
CONDITION_REASON_PATTERN: Final = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
CONDITION_TYPE_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
# Kubernetes' quantity syntax, with the decimal exponent held to two digits: Kubernetes itself
# cannot represent more than 2^63, and an exponent of thousands of digits costs its parsers (and
# ours, once) seconds of CPU. QUANTITY_MAX_LENGTH bounds the text as a whole.
QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]{1,2}))?$"
)
QUANTITY_MAX_LENGTH: Final = 64
CONDITION_MESSAGE_MAX: Final = 32768

# Limits of the VM status schema; the contract reader holds provider data to the same limits, so
# a status computed from any provider object is always accepted by the API server.
POWER_STATE_MAX: Final = 64
PROVIDER_ID_MAX: Final = 1024
ADDRESS_MAX: Final = 253
ADDRESSES_MAX: Final = 64
PROVIDER_METADATA_ENTRIES_MAX: Final = 64
PROVIDER_METADATA_VALUE_MAX: Final = 4096
