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
    SNAPSHOT_PLURAL,
    STORAGE_CLASS_KIND,
    STORAGE_CLASS_PLURAL,
    VERSION,
    VOLUME_ATTRIBUTES_CLASS_KIND,
    VOLUME_ATTRIBUTES_CLASS_PLURAL,
)

__all__ = [
    "ADDRESSES_PER_NIC",
    "ADDRESS_CLAIM_ATTEMPTS",
    "ADDRESS_MANAGED_BY_LABEL",
    "ADDRESS_MANAGER",
    "ADDRESS_POOL_POLL_SECONDS",
    "ADMISSION_COUNTING_SECONDS",
    "AGENT_BACKOFF_FIRST_SECONDS",
    "AGENT_BACKOFF_MAX_SECONDS",
    "AGENT_CALLS_PER_HOST",
    "AGENT_TIMEOUT_SECONDS",
    "CALL_WAIT_SECONDS",
    "CLAIM_INTERFACE_LABEL",
    "CLAIM_LIBVIRT_NETWORK_ANNOTATION",
    "CLAIM_MACHINE_UID_LABEL",
    "CLAIM_MAC_ANNOTATION",
    "CLAIM_NETWORK_ANNOTATION",
    "CONNECTION_PROBLEM_REASONS",
    "CONNECT_TIMEOUT_SECONDS",
    "DEFAULT_HOST_BURST",
    "DEFAULT_HOST_QPS",
    "DEFAULT_MAX_CONCURRENT_OPERATIONS",
    "DEFAULT_SHUTDOWN_TIMEOUT_SECONDS",
    "DRAIN_ACTIVE_SECONDS",
    "DRAIN_HOST_LABEL",
    "DRAIN_IDLE_SECONDS",
    "DRAIN_MACHINE_BLOCKED",
    "DRAIN_MACHINE_GONE",
    "DRAIN_MACHINE_MIGRATING",
    "DRAIN_MACHINE_MOVED",
    "DRAIN_MACHINE_PENDING",
    "DRAIN_MACHINE_POWERED_OFF",
    "DRAIN_MACHINE_POWERING_OFF",
    "DRAIN_MACHINE_STOPPED",
    "DRAIN_MAX_ATTEMPTS",
    "DRAIN_MIGRATION_PREFIX",
    "DRAIN_ON_CANCEL_ABORT",
    "DRAIN_ON_CANCEL_FINISH",
    "DRAIN_PHASE_BLOCKED",
    "DRAIN_PHASE_DRAINED",
    "DRAIN_PHASE_DRAINING",
    "DRAIN_PHASE_PLANNED",
    "DRAIN_PHASE_PLANNING",
    "DRAIN_REASON_BLOCKED",
    "DRAIN_REASON_DRAINED",
    "DRAIN_REASON_DRAINING",
    "DRAIN_REASON_DRY_RUN",
    "DRAIN_REASON_PLANNING",
    "EVENT_ADDRESS_CLAIMED",
    "EVENT_ADDRESS_RELEASED",
    "EVENT_CLEANUP_FAILED",
    "EVENT_CONSOLE_ATTACHED",
    "EVENT_CONSOLE_DETACHED",
    "EVENT_CONSOLE_TAKEN_OVER",
    "EVENT_DEFINED",
    "EVENT_DISK_GROWN",
    "EVENT_DRAIN_CANCELLED",
    "EVENT_DRAIN_CLEARED",
    "EVENT_DRAIN_MACHINE_BLOCKED",
    "EVENT_DRAIN_MIGRATION_ABORTED",
    "EVENT_DRAIN_MIGRATION_CREATED",
    "EVENT_DRAIN_POWER_OFF",
    "EVENT_DRAIN_RETRY",
    "EVENT_LIVE_UPDATE_FAILED",
    "EVENT_MACHINE_MIGRATED",
    "EVENT_MIGRATION_SCHEDULED",
    "EVENT_MIGRATION_SOURCE_CLEANED",
    "EVENT_MIGRATION_STARTED",
    "EVENT_MIGRATION_TARGET_CLEANED",
    "EVENT_MIGRATION_TARGET_GONE",
    "EVENT_MIGRATION_TARGET_PREPARED",
    "EVENT_NOTHING_REMOVED",
    "EVENT_PLACED",
    "EVENT_POOL_SKIPPED",
    "EVENT_POWERED_OFF",
    "EVENT_PREEMPTING",
    "EVENT_PREEMPTION_ENDED",
    "EVENT_REDEFINED",
    "EVENT_RESTORED",
    "EVENT_RESTORE_HOLD",
    "EVENT_RESUMED",
    "EVENT_SAVED_STATE_DISCARDED",
    "EVENT_SHUTDOWN_REQUESTED",
    "EVENT_SNAPSHOT_RECOVERED",
    "EVENT_SNAPSHOT_TAKEN",
    "EVENT_SNAPSHOT_VOLUMES_DELETED",
    "EVENT_SPREAD_NOT_HONOURED",
    "EVENT_STARTED",
    "EVENT_SUSPENDED",
    "EVENT_UNDEFINED",
    "EVENT_UPDATED_LIVE",
    "EVENT_VNC_ATTACHED",
    "EVENT_VNC_DETACHED",
    "EVENT_VOLUME_CREATED",
    "EVENT_VOLUME_DELETED",
    "EVENT_WOKEN",
    "EVICTION_LIVE_MIGRATE",
    "EVICTION_NONE",
    "EVICTION_POWER_OFF",
    "FINALIZER",
    "GROUP",
    "GUEST_AGENT_CHANNEL",
    "HEARTBEAT_GRACE_MIN_SECONDS",
    "HEARTBEAT_GRACE_SECONDS",
    "HEARTBEAT_LEASE_PREFIX",
    "HEARTBEAT_SECONDS",
    "HOP_ADDRESS_ANNOTATION",
    "HOP_BUFFER",
    "HOP_CONNECT_TIMEOUT",
    "HOP_PEER_NAME",
    "HOP_READ_CHUNK",
    "HOST_CONDITION_CONNECTED",
    "HOST_CONDITION_DRAINED",
    "HOST_CONDITION_READY",
    "HOST_FIELD",
    "HOST_KIND",
    "HOST_LABEL",
    "HOST_NAME_MAX_LENGTH",
    "HOST_NAME_PATTERN",
    "HOST_PLURAL",
    "HOST_SHORT_NAMES",
    "IMAGE_KIND",
    "IMAGE_PLURAL",
    "IPADDRESS_GROUP",
    "IPADDRESS_KIND",
    "IPADDRESS_PLURAL",
    "IPADDRESS_VERSION",
    "KEPT_LABELS",
    "MACHINE_CLASS_KIND",
    "MACHINE_CLASS_PLURAL",
    "MACHINE_KIND",
    "MACHINE_PLURAL",
    "MACHINE_SHORT_NAMES",
    "MACHINE_STATS_DEADLINE_SECONDS",
    "MAX_REPORTED_ADDRESSES",
    "METADATA_NAMESPACE",
    "METADATA_PREFIX",
    "METRICS_PREFIX",
    "MIGRATION_CLAIM_RETRY_SECONDS",
    "MIGRATION_CONDITION_SUCCEEDED",
    "MIGRATION_DEADLINE_SECONDS_PER_GIB",
    "MIGRATION_FINALIZER",
    "MIGRATION_KIND",
    "MIGRATION_MAX_PER_CLUSTER",
    "MIGRATION_MAX_PER_HOST",
    "MIGRATION_NO_PROGRESS_SECONDS",
    "MIGRATION_PHASE_CANCELLED",
    "MIGRATION_PHASE_FAILED",
    "MIGRATION_PHASE_MIGRATING",
    "MIGRATION_PHASE_PENDING",
    "MIGRATION_PHASE_PREPARING",
    "MIGRATION_PHASE_SCHEDULING",
    "MIGRATION_PHASE_SUCCEEDED",
    "MIGRATION_PLURAL",
    "MIGRATION_PROGRESS_SECONDS",
    "MIGRATION_REASON_ALREADY_MIGRATING",
    "MIGRATION_REASON_CANCELLED",
    "MIGRATION_REASON_CLUSTER_LIMIT",
    "MIGRATION_REASON_CREDENTIALS_MISSING",
    "MIGRATION_REASON_DEADLINE_EXCEEDED",
    "MIGRATION_REASON_HANDING_OVER",
    "MIGRATION_REASON_HOST_LIMIT",
    "MIGRATION_REASON_MACHINE_DELETED",
    "MIGRATION_REASON_MACHINE_NOT_BOUND",
    "MIGRATION_REASON_MACHINE_NOT_FOUND",
    "MIGRATION_REASON_MACHINE_NOT_RUNNING",
    "MIGRATION_REASON_MIGRATING",
    "MIGRATION_REASON_MIGRATION_FAILED",
    "MIGRATION_REASON_NO_PROGRESS",
    "MIGRATION_REASON_NO_TARGET",
    "MIGRATION_REASON_PENDING",
    "MIGRATION_REASON_PINNED",
    "MIGRATION_REASON_PREPARING",
    "MIGRATION_REASON_SAME_HOST",
    "MIGRATION_REASON_SUCCEEDED",
    "MIGRATION_REASON_TARGET_CORDONED",
    "MIGRATION_REASON_TARGET_NOT_FOUND",
    "MIGRATION_REASON_TARGET_NOT_MIGRATABLE",
    "MIGRATION_REASON_TARGET_NOT_READY",
    "MIGRATION_REASON_TARGET_REQUIRED",
    "MIGRATION_REASON_TARGET_UNSUITABLE",
    "MIGRATION_REASON_WAITING_FOR_IMAGE",
    "MIGRATION_SHORT_NAMES",
    "MIGRATION_SLOT_RECHECK_SECONDS",
    "MIGRATION_TARGET_GONE_RECHECK_SECONDS",
    "MIGRATION_TARGET_WATCH_SECONDS",
    "MODIFY_VOLUME_INFEASIBLE",
    "MODIFY_VOLUME_IN_PROGRESS",
    "MODIFY_VOLUME_PENDING",
    "NETWORK_KIND",
    "NETWORK_PLURAL",
    "PLUGIN_CLOSE_WAIT",
    "PLUGIN_MAX_FRAME",
    "PORTFORWARD_BATCH",
    "PORTFORWARD_BUFFER",
    "PORTFORWARD_DIAL_TIMEOUT",
    "PORTFORWARD_READ_CHUNK",
    "PORTFORWARD_SUBPROTOCOL",
    "PORTFORWARD_SUBPROTOCOLS",
    "PORTFORWARD_SUBRESOURCE",
    "PREEMPTION_GRACE_SECONDS",
    "REASON_ADDRESS_OUTSIDE_POOL",
    "REASON_ADDRESS_POOL_CONFLICT",
    "REASON_ADDRESS_POOL_EXHAUSTED",
    "REASON_ADDRESS_STILL_LEASED",
    "REASON_AMBIGUOUS_DEFAULT",
    "REASON_FOREIGN_DOMAIN",
    "REASON_GUEST_AGENT_RESPONDING",
    "REASON_GUEST_AGENT_UNRESPONSIVE",
    "REASON_GUEST_NOT_COMPLYING",
    "REASON_HELD_FOR_RESTORE",
    "REASON_HOST_CHANGED",
    "REASON_HOST_LABEL_RESTORED",
    "REASON_HOST_NOT_READY",
    "REASON_HOST_READY",
    "REASON_IMAGE_IMPORT_FAILED",
    "REASON_IMPORTING_IMAGE",
    "REASON_INVALID_SPEC",
    "REASON_LIBVIRT_UNAVAILABLE",
    "REASON_LINK_MISMATCH",
    "REASON_NOT_ADMITTED",
    "REASON_NOT_AVAILABLE_ON_HOST",
    "REASON_NOT_LINKED",
    "REASON_OWNED_BY_ANOTHER",
    "REASON_POWERED_OFF",
    "REASON_REFERENCE_NOT_FOUND",
    "REASON_RETRYING",
    "REASON_RUNNING",
    "REASON_SECRET_NOT_FOUND",
    "REASON_SECRET_NOT_READABLE",
    "REASON_SNAPSHOT_NOT_READY",
    "REASON_STARTING",
    "REASON_STOPPING",
    "REASON_SUSPENDED",
    "REASON_UP_TO_DATE",
    "REASON_VIRTUAL_MACHINE_NOT_FOUND",
    "REASON_WAITING_FOR_ADDRESS",
    "REASON_WAITING_FOR_PREEMPTION",
    "RESERVATION_LEASE_MINUTES",
    "RESOLUTION_REASONS",
    "RESTORE_CONDITION_SUCCEEDED",
    "RESTORE_FINALIZER",
    "RESTORE_KIND",
    "RESTORE_PHASE_FAILED",
    "RESTORE_PHASE_PENDING",
    "RESTORE_PHASE_POWERING_OFF",
    "RESTORE_PHASE_RESTORING",
    "RESTORE_PHASE_SUCCEEDED",
    "RESTORE_PHASE_WAITING",
    "RESTORE_PLURAL",
    "RESTORE_REASON_ANOTHER_RESTORE",
    "RESTORE_REASON_FAILED",
    "RESTORE_REASON_HOST_UNREACHABLE",
    "RESTORE_REASON_IN_PROGRESS",
    "RESTORE_REASON_MACHINE_NOT_BUILT",
    "RESTORE_REASON_MACHINE_NOT_FOUND",
    "RESTORE_REASON_RESTORED",
    "RESTORE_REASON_SNAPSHOT_NOT_FOUND",
    "RESTORE_REASON_SNAPSHOT_NOT_READY",
    "RESTORE_REASON_SNAPSHOT_OF_ANOTHER_MACHINE",
    "RESTORE_REASON_UNSUPPORTED_DISK",
    "RESTORE_REASON_WAITING_FOR_POWER_OFF",
    "RESTORE_SHORT_NAMES",
    "RESTORE_WHEN_RUNNING_POWER_OFF",
    "RESTORE_WHEN_RUNNING_WAIT",
    "SECRETS_CLUSTER_ROLE",
    "SNAPSHOT_BOOT_DISK",
    "SNAPSHOT_COMMIT_TIMEOUT_SECONDS",
    "SNAPSHOT_CONDITION_READY",
    "SNAPSHOT_FINALIZER",
    "SNAPSHOT_KIND",
    "SNAPSHOT_PLURAL",
    "SNAPSHOT_REASON_AGENT_UNAVAILABLE",
    "SNAPSHOT_REASON_DELETING",
    "SNAPSHOT_REASON_FAILED",
    "SNAPSHOT_REASON_HOST_UNREACHABLE",
    "SNAPSHOT_REASON_IN_USE",
    "SNAPSHOT_REASON_POOL_FULL",
    "SNAPSHOT_REASON_READY",
    "SNAPSHOT_REASON_SOURCE_NOT_BUILT",
    "SNAPSHOT_REASON_SOURCE_NOT_FOUND",
    "SNAPSHOT_REASON_SOURCE_NOT_LINKED",
    "SNAPSHOT_REASON_TAKING",
    "SNAPSHOT_REASON_UNKNOWN_DISK",
    "SNAPSHOT_SHORT_NAMES",
    "SNAPSHOT_VOLUME_PREFIX",
    "SSH_PORT",
    "STATS_FANOUT_SECONDS",
    "STATS_HOST_FIELD",
    "STATS_KIND",
    "STATS_LIST_KIND",
    "STATS_RESOURCE",
    "STORAGE_CLASS_KIND",
    "STORAGE_CLASS_PLURAL",
    "TLS_READ_CHUNK",
    "TOP_INTERVAL_SECONDS",
    "TOP_REQUEST_TIMEOUT",
    "VERSION",
    "VM_API_CRD_LABEL",
    "VM_API_CRD_LABEL_VALUE",
    "VNC_READ_CHUNK",
    "VNC_SCREENSHOT_PATH",
    "VNC_SCREENSHOT_TIMEOUT",
    "VNC_SUBPROTOCOLS",
    "VNC_SUBRESOURCE",
    "VOLUME_ATTRIBUTES_CLASS_KIND",
    "VOLUME_ATTRIBUTES_CLASS_PLURAL",
    "VOLUME_ATTRIBUTES_DRIVER",
]

MACHINE_KIND: Final = "LibvirtMachine"
MACHINE_PLURAL: Final = "libvirtmachines"
MACHINE_SHORT_NAMES: Final = ("lvm", "lvms")

FINALIZER: Final = f"{GROUP}/libvirt-machine"

HOST_KIND: Final = "LibvirtHost"
HOST_PLURAL: Final = "libvirthosts"
HOST_SHORT_NAMES: Final = ("lvh",)
HOST_CONDITION_READY: Final = "Ready"
REASON_HOST_READY: Final = "HostReady"
REASON_LIBVIRT_UNAVAILABLE: Final = "LibvirtUnavailable"
# Each host's daemon renews the Lease `<prefix><host>` in its own namespace, as a kubelet renews its
# node's; placement counts a host whose Lease is older than the grace as not ready.
HEARTBEAT_LEASE_PREFIX: Final = "libvirt-host-"
# A host's name (the daemon's --host, a LibvirtHost's name, spec.host) is the value of the host
# label, which Kubernetes caps at 63 characters, and the tail of its Lease's name (253 at most, so
# 240 after the prefix): the label is the tighter bound. A DNS subdomain in lower case, like a
# node's name, so it is a valid label value and Lease name too.
HOST_NAME_MAX_LENGTH: Final = 63
HOST_NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
HEARTBEAT_SECONDS: Final = 10.0
HEARTBEAT_GRACE_SECONDS: Final = 40.0
# The least --heartbeat-grace: renewed every quarter of it, a beat is then at most 1 s apart.
HEARTBEAT_GRACE_MIN_SECONDS: Final = 4.0

# Remote hosts (a LibvirtHost with spec.connection): served by a daemon in remote mode, which holds
# the host's heartbeat Lease as its claim; another replica takes the host over once the Lease is
# older than the grace. `Connected` says whether that daemon reaches the host's libvirtd.
HOST_CONDITION_CONNECTED: Final = "Connected"
REASON_CONNECTED: Final = "Connected"
REASON_AUTHENTICATION_FAILED: Final = "AuthenticationFailed"
REASON_HOST_KEY_MISMATCH: Final = "HostKeyMismatch"
REASON_UNREACHABLE: Final = "Unreachable"
REASON_PROTOCOL_ERROR: Final = "ProtocolError"
# spec.connection.uri names a transport the daemon does not offer, or is malformed.
REASON_INVALID_CONNECTION: Final = "InvalidConnection"
# The credentials Secret lacks a key the transport needs, or a key does not hold what it should.
REASON_INVALID_SECRET: Final = "InvalidSecret"
# spec.connection.secretRef names a namespace other than the daemon's own.
REASON_SECRET_NOT_ALLOWED: Final = "SecretNotAllowed"
# Client-side bounds on the calls to one host's libvirtd (spec.rateLimit, maxConcurrentOperations).
DEFAULT_HOST_QPS: Final = 1000.0
DEFAULT_HOST_BURST: Final = 2000
DEFAULT_MAX_CONCURRENT_OPERATIONS: Final = 4
# How long a call may wait for a token or a slot before it fails as retryable ("host busy").
CALL_WAIT_SECONDS: Final = 30.0
# Guest-agent calls (addresses and facts from inside the guest) answer at the guest's pleasure, and
# libvirt waits for ever by default: each call gets this response timeout (set on the domain with
# virDomainAgentSetResponseTimeout, libvirt >= 5.10), runs outside the host's general call slots on
# a budget of its own (at most AGENT_CALLS_PER_HOST at once, one per machine, never waited for),
# and an agent that times out is not asked again for AGENT_BACKOFF_FIRST_SECONDS, doubling up to
# AGENT_BACKOFF_MAX_SECONDS while it stays silent. libvirtd serves 5 requests at once per client
# (max_client_requests), so the agent budget leaves the general calls room on the connection.
AGENT_TIMEOUT_SECONDS: Final = 3
AGENT_CALLS_PER_HOST: Final = 2
AGENT_BACKOFF_FIRST_SECONDS: Final = 10.0
AGENT_BACKOFF_MAX_SECONDS: Final = 300.0
# How long opening a connection may take (a host that drops packets would otherwise take minutes).
CONNECT_TIMEOUT_SECONDS: Final = 15.0

# The host a machine is bound to, for people and label selectors; it follows spec.host. Daemons
# select their machines by HOST_FIELD (immutable once set), never by this label anyone can edit.
HOST_LABEL: Final = f"{GROUP}/host"
HOST_FIELD: Final = "spec.host"
# The labels the leader and the daemons read of VMs and LibvirtMachines besides the generic
# controller's (`generic.constants.KEPT_LABELS`): any other is dropped before it is decoded.
KEPT_LABELS: Final = (HOST_LABEL,)

# The contract's marker on provider CRDs: the generic controller finds provider kinds through it.
VM_API_CRD_LABEL: Final = "vm-api.io/v1alpha1"
VM_API_CRD_LABEL_VALUE: Final = "v1alpha1"

# Ownership marker inside a domain's <metadata>: libvirt keeps foreign-namespaced elements verbatim.
METADATA_NAMESPACE: Final = "https://infrastructure.vm-api.io/libvirt-machine/v1alpha1"
METADATA_PREFIX: Final = "vmapi"

DEFAULT_SHUTDOWN_TIMEOUT_SECONDS: Final = 120

# The virtio-serial channel qemu's guest agent listens on: rendered into every domain, asked by
# the driver for guest facts and graceful power-off.
GUEST_AGENT_CHANNEL: Final = "org.qemu.guest_agent.0"

# The `driverName` of the VolumeAttributesClasses this provider honours (a disk's
# volumeAttributesClassName; docs/catalog.md). Kubernetes wants a CSI-style driver name there:
# a DNS subdomain, no slash, so not the API group's `infrastructure.vm-api.io/...` spelling.
VOLUME_ATTRIBUTES_DRIVER: Final = "libvirt.infrastructure.vm-api.io"
# A disk's status.disks[].modifyVolumeStatus.status, as a PersistentVolumeClaim's: the new class is
# waiting for the machine (suspended, or libvirt refused it live), being applied, or cannot be.
MODIFY_VOLUME_PENDING: Final = "Pending"
MODIFY_VOLUME_IN_PROGRESS: Final = "InProgress"
MODIFY_VOLUME_INFEASIBLE: Final = "Infeasible"

# Condition reasons of this provider (the contract copies a provider's own reason verbatim).
REASON_REFERENCE_NOT_FOUND: Final = "ReferenceNotFound"
REASON_AMBIGUOUS_DEFAULT: Final = "AmbiguousDefault"
REASON_INVALID_SPEC: Final = "InvalidSpec"
REASON_SECRET_NOT_FOUND: Final = "SecretNotFound"
# The daemon may not read Secrets in the machine's namespace: an admin has not opted it in.
REASON_SECRET_NOT_READABLE: Final = "SecretNotReadable"
REASON_NOT_AVAILABLE_ON_HOST: Final = "NotAvailableOnHost"
# A disk names a LibvirtSnapshot whose copy is not complete yet (or is being deleted): it waits.
REASON_SNAPSHOT_NOT_READY: Final = "SnapshotNotReady"
# A LibvirtNetwork's address pool overlaps another network's pool, or its libvirt network's DHCP
# range, or lies outside that network's subnet: no address of it is handed out.
REASON_ADDRESS_POOL_CONFLICT: Final = "AddressPoolConflict"
# The ClusterRole a RoleBinding in a namespace grants the daemon to read cloud-init Secrets there.
SECRETS_CLUSTER_ROLE: Final = "vm-api-libvirt-provider-secrets"
# The reasons the resolver reports (beside the contract's UnsupportedByProvider).
RESOLUTION_REASONS: Final = (
    REASON_REFERENCE_NOT_FOUND,
    REASON_AMBIGUOUS_DEFAULT,
    REASON_INVALID_SPEC,
    REASON_SECRET_NOT_FOUND,
    REASON_SECRET_NOT_READABLE,
    REASON_NOT_AVAILABLE_ON_HOST,
    REASON_SNAPSHOT_NOT_READY,
    REASON_ADDRESS_POOL_CONFLICT,
)

# Public addresses (`publicIP: true` on a network with an address pool). Each address a machine
# holds is a `networking.k8s.io/v1` IPAddress named after it: its creation is the atomic claim (a
# second create of the name fails), its parentRef names the LibvirtMachine, and these labels and
# annotations say which machine, interface and network hold it (docs/catalog.md).
IPADDRESS_GROUP: Final = "networking.k8s.io"
IPADDRESS_VERSION: Final = "v1"
IPADDRESS_PLURAL: Final = "ipaddresses"
IPADDRESS_KIND: Final = "IPAddress"
# Kubernetes' own label for who manages an IPAddress: the API server's Service IP repair loop
# touches only its own (`ipallocator.k8s.io`), and this provider only those with its value.
ADDRESS_MANAGED_BY_LABEL: Final = "ipaddress.kubernetes.io/managed-by"
ADDRESS_MANAGER: Final = "libvirt.infrastructure.vm-api.io"
CLAIM_MACHINE_UID_LABEL: Final = f"{GROUP}/machine-uid"
CLAIM_INTERFACE_LABEL: Final = f"{GROUP}/interface"
# An annotation, not a label: a LibvirtNetwork's name may be longer than a label value.
CLAIM_NETWORK_ANNOTATION: Final = f"{GROUP}/network"
CLAIM_MAC_ANNOTATION: Final = f"{GROUP}/mac"
CLAIM_LIBVIRT_NETWORK_ANNOTATION: Final = f"{GROUP}/libvirt-network"
# Free addresses a pass tries before it gives up for now (each failed create means another
# daemon took that address a moment ago; the next pass starts from a fresh list).
ADDRESS_CLAIM_ATTEMPTS: Final = 8
# Seconds between two looks for a free address while a machine waits on an exhausted pool
# (releases are not watched: a machine deleted on any host frees its address).
ADDRESS_POOL_POLL_SECONDS: Final = 10.0
# The lease time of a DHCP reservation for a public address, in minutes (dnsmasq's minimum): how
# long a destroyed guest's lease can keep the address from its next holder.
RESERVATION_LEASE_MINUTES: Final = 2
# The machine holds its address, but the host's DHCP server still leases it to another MAC (the
# previous holder's guest): its domain is created once that lease ran out.
REASON_ADDRESS_STILL_LEASED: Final = "AddressStillLeased"
# No address of the pool is free: the machine waits, and is built once one is released.
REASON_ADDRESS_POOL_EXHAUSTED: Final = "AddressPoolExhausted"
# The machine holds an address its network's pool no longer contains (the pool was shrunk): it
# keeps it until it is deleted, and says so.
REASON_ADDRESS_OUTSIDE_POOL: Final = "AddressOutsidePool"

# Condition reasons of the machine loop (InfrastructureReady and UpToDate).
REASON_RUNNING: Final = "Running"
REASON_POWERED_OFF: Final = "PoweredOff"
REASON_SUSPENDED: Final = "Suspended"
REASON_STARTING: Final = "Starting"
REASON_WAITING_FOR_ADDRESS: Final = "WaitingForAddress"
REASON_STOPPING: Final = "Stopping"
REASON_FOREIGN_DOMAIN: Final = "ForeignDomain"
REASON_UP_TO_DATE: Final = "UpToDate"
REASON_GUEST_NOT_COMPLYING: Final = "GuestNotComplying"
# The machine's guest agent did not answer within AGENT_TIMEOUT_SECONDS (a Warning Event on the
# machine, and `providerMetadata.guestAgent: unresponsive` until it answers again).
REASON_GUEST_AGENT_UNRESPONSIVE: Final = "GuestAgentUnresponsive"
# The guest agent answered again after being unresponsive.
REASON_GUEST_AGENT_RESPONDING: Final = "GuestAgentResponding"
REASON_IMPORTING_IMAGE: Final = "ImportingImage"
REASON_IMAGE_IMPORT_FAILED: Final = "ImageImportFailed"
REASON_HOST_CHANGED: Final = "HostChanged"
# The host label named another host than spec.host and was set back to spec.host.
REASON_HOST_LABEL_RESTORED: Final = "HostLabelRestored"
# The machine's host stopped renewing its heartbeat: its state is unknown, and it is not moved.
REASON_HOST_NOT_READY: Final = "HostNotReady"
# The machine's host does not admit it (cordoned, full, not matching what the machine asks): it is
# built nowhere and counted nowhere until the host admits it (`hosts/admission.py`).
REASON_NOT_ADMITTED: Final = "NotAdmitted"
# The machine's host admits it once the spot machines preempted to make room for it are off: said
# without a Warning, and the placer counts the machine on its host meanwhile (unlike NotAdmitted).
REASON_WAITING_FOR_PREEMPTION: Final = "WaitingForPreemption"
# The machine's host is served, but its daemon cannot reach the host's libvirtd (a remote host's
# network, credentials or host key): its state is unknown, and it is not moved.
REASON_HOST_UNREACHABLE: Final = "HostUnreachable"
# A libvirt call failed in a way that usually passes (libvirtd restarting, a timeout): retried with
# backoff, and, unlike ProviderError, not terminal, so it never becomes the VM's failureReason.
REASON_RETRYING: Final = "Retrying"
# ... and of the link between a LibvirtMachine and its VirtualMachine.
REASON_NOT_LINKED: Final = "NotLinked"
REASON_VIRTUAL_MACHINE_NOT_FOUND: Final = "VirtualMachineNotFound"
REASON_LINK_MISMATCH: Final = "LinkMismatch"
REASON_OWNED_BY_ANOTHER: Final = "OwnedByAnotherVirtualMachine"

# Event reasons: what the daemon did to a machine.
EVENT_DEFINED: Final = "Defined"
EVENT_STARTED: Final = "Started"
EVENT_RESUMED: Final = "Resumed"
EVENT_WOKEN: Final = "Woken"
EVENT_SHUTDOWN_REQUESTED: Final = "ShutdownRequested"
EVENT_POWERED_OFF: Final = "PoweredOff"
EVENT_SUSPENDED: Final = "Suspended"
EVENT_SAVED_STATE_DISCARDED: Final = "SavedStateDiscarded"
EVENT_UNDEFINED: Final = "Undefined"
EVENT_VOLUME_CREATED: Final = "VolumeCreated"
EVENT_VOLUME_DELETED: Final = "VolumeDeleted"
EVENT_CLEANUP_FAILED: Final = "CleanupFailed"
EVENT_NOTHING_REMOVED: Final = "NothingRemoved"
EVENT_POOL_SKIPPED: Final = "PoolSkipped"
EVENT_ADDRESS_CLAIMED: Final = "AddressClaimed"
EVENT_ADDRESS_RELEASED: Final = "AddressReleased"
EVENT_DISK_GROWN: Final = "DiskGrown"
EVENT_REDEFINED: Final = "Redefined"
EVENT_UPDATED_LIVE: Final = "UpdatedLive"
EVENT_LIVE_UPDATE_FAILED: Final = "LiveUpdateFailed"
EVENT_PLACED: Final = "Placed"
# The console's audit trail on the LibvirtMachine: who attached, and when they left after how long.
EVENT_CONSOLE_ATTACHED: Final = "ConsoleAttached"
EVENT_CONSOLE_DETACHED: Final = "ConsoleDetached"
# A writer took the console over from another (`kubectl vm console --force`): who from whom.
EVENT_CONSOLE_TAKEN_OVER: Final = "ConsoleTakenOver"
EVENT_SPREAD_NOT_HONOURED: Final = "SpreadNotHonoured"
# On the machine placed by preempting spot machines (Normal): which ones, on which host. The
# preempted machines get the API's `Preempted` (generic.constants.REASON_PREEMPTED).
EVENT_PREEMPTING: Final = "Preempting"
# On a preempted machine whose host has room again: it is started again.
EVENT_PREEMPTION_ENDED: Final = "PreemptionEnded"

# Every connection reason that is not `Connected`.
CONNECTION_PROBLEM_REASONS: Final = (
    REASON_AUTHENTICATION_FAILED,
    REASON_HOST_KEY_MISMATCH,
    REASON_UNREACHABLE,
    REASON_PROTOCOL_ERROR,
    REASON_SECRET_NOT_FOUND,
    REASON_INVALID_CONNECTION,
    REASON_INVALID_SECRET,
    REASON_SECRET_NOT_ALLOWED,
)

# A LibvirtMachine's status.addresses holds at most 64 entries (the CRD's bound): a guest whose
# agent reported more made every status write fail. Each NIC reports at most 6 (IPv4 first), so
# the ten NICs a VM may have fit, and one NIC's many addresses never crowd out another's.
MAX_REPORTED_ADDRESSES: Final = 64
ADDRESSES_PER_NIC: Final = 6

# The project's Prometheus prefix (every metric of the daemon starts with it), and the seconds a
# scrape waits for one host's bulk domain statistics before it answers without them (marked
# partial): under Prometheus' default 10 s scrape timeout, with room for the rest of /metrics.
METRICS_PREFIX: Final = "vmapi"
MACHINE_STATS_DEADLINE_SECONDS: Final = 5.0

# -- the console subresources (docs/console.md) ---------------------------------------------------
# The aggregated API group the daemons serve through the kube-apiserver, and its one version.
SUBRESOURCE_GROUP: Final = "subresources.infrastructure.vm-api.io"
SUBRESOURCE_VERSION: Final = "v1alpha1"
# The resource whose subresources are served (RBAC: `get` on `libvirtmachines/console`).
CONSOLE_RESOURCE: Final = "libvirtmachines"
CONSOLE_SUBRESOURCE: Final = "console"
# The WebSocket subprotocol of the console stream: raw bytes in binary frames, both ways, as
# KubeVirt's `virtctl console` speaks it.
CONSOLE_SUBPROTOCOL: Final = "plain.kubevirt.io"
# kube-system's ConfigMap in which the API server publishes its front-proxy trust.
AUTHENTICATION_CONFIGMAP_NAMESPACE: Final = "kube-system"
AUTHENTICATION_CONFIGMAP: Final = "extension-apiserver-authentication"
# Seconds between two reads of that ConfigMap (a rotated front-proxy CA is picked up within).
AUTHENTICATION_REFRESH_SECONDS: Final = 60.0
# Seconds between two keepalive pings on an idle console WebSocket (under the 21 s after which
# some proxies drop an idle connection).
CONSOLE_PING_SECONDS: Final = 10.0
# Seconds between pings while the client's input flows (a paste). The API server notices a client
# that died only when it writes to it; during a paste with no output from the guest, a ping is
# all it writes, and until it notices, the dead client's session goes on.
CONSOLE_BUSY_PING_SECONDS: Final = 1.0
# The largest WebSocket frame payload the console accepts from a client, in bytes.
CONSOLE_MAX_FRAME: Final = 1 << 20
# Bytes read from the guest's console per read, and output chunks queued toward a slow client
# before reading from the guest pauses.
CONSOLE_READ_CHUNK: Final = 64 * 1024
CONSOLE_QUEUE_CHUNKS: Final = 256
# Bytes of a client's input handed to libvirt per call. libvirt's send blocks while its
# connection's socket to libvirtd is full, which during a paste is most of the time (the guest's
# serial line takes some tens of KiB/s): small pieces hold the stream's lock, which libvirt's
# event thread needs to read this console's output, briefly, and let the session notice between
# two that its client is gone.
CONSOLE_INPUT_CHUNK: Final = 4 * 1024
# (connect, read) seconds of the console endpoint's calls to the API server (its ConfigMap, the
# SubjectAccessReview, the machine), so a slow API server never holds a request for long.
CONSOLE_API_TIMEOUT: Final = (5.0, 10.0)
# Seconds a console request's headers may take to arrive, and a write to the client may block.
CONSOLE_IO_TIMEOUT: Final = 30.0
# Seconds a new connection has, in all, for its TLS handshake and its request head: past it the
# connection is closed, so a client that dribbles bytes cannot hold a slot.
CONSOLE_HEAD_DEADLINE: Final = 10.0
# The largest request head (request line and headers) the console endpoint reads; connections it
# serves at once (more are closed when accepted); ping intervals a client may stay silent (not even
# a pong) before its session ends.
CONSOLE_MAX_HEAD: Final = 16 * 1024
CONSOLE_MAX_CONNECTIONS: Final = 64
CONSOLE_SILENT_PINGS: Final = 3
# Seconds `kubectl vm` waits for the console's WebSocket handshake.
CONSOLE_CONNECT_TIMEOUT: Final = 30.0
# The component that posts the console's audit Events (`source.component`).
CONSOLE_EVENT_COMPONENT: Final = "libvirt-provider-console"
# -- sharing a console (docs/console.md, "Sharing") --
# Bytes of the guest's last output replayed to a session on attach (--console-replay-bytes).
CONSOLE_REPLAY_BYTES: Final = 16 * 1024
# Seconds without a keystroke after which a writer's session ends (--console-idle-timeout; 0:
# never); viewers have no limit unless --console-viewer-idle-timeout gives one.
CONSOLE_WRITER_IDLE_SECONDS: Final = 1800.0
CONSOLE_VIEWER_IDLE_SECONDS: Final = 0.0
# Bytes of output a viewer may have queued before it is cut off (a slow viewer never slows the
# writer nor pauses the guest's console).
CONSOLE_VIEWER_BACKLOG_BYTES: Final = 4 * 1024 * 1024
# The most `kubectl vm console --logs` sends: the last bytes of the host's console log.
CONSOLE_LOGS_MAX_BYTES: Final = 1024 * 1024
# Machines whose last output the daemon keeps in memory after their last session left.
CONSOLE_KEPT_REPLAYS: Final = 256
# -- remote hosts' console logs, kept by the daemon serving them (docs/console.md, "Remote hosts'
# console logs") --
# Bytes of one console log file before it is rotated (--console-log-bytes); a machine's log
# takes at most this times (1 + CONSOLE_LOG_ROTATED) on the daemon's disk.
CONSOLE_LOG_BYTES: Final = 4 * 1024 * 1024
# Rotated files kept beside the current one (`<file>.1`, the older one).
CONSOLE_LOG_ROTATED: Final = 1
# Seconds between the keeper's passes over the served hosts' machines (in-memory copies only; a
# libvirt call only to open a console).
CONSOLE_KEEPER_SECONDS: Final = 1.0
# Backoff of a console that could not be opened, or whose stream ended while its machine still
# runs: the first retry after this many seconds, doubling up to the cap.
CONSOLE_KEEPER_RETRY_SECONDS: Final = 2.0
CONSOLE_KEEPER_RETRY_MAX_SECONDS: Final = 300.0
# A stream that stayed open this long ended for a new reason: its retries start from the first.
CONSOLE_KEEPER_HEALTHY_SECONDS: Final = 60.0

# Port-forward (docs/console.md, "Port-forward and ssh"): `libvirtmachines/portforward/{port}`,
# RBAC `get` on `libvirtmachines/portforward`; one TCP stream per WebSocket, in binary frames of the
# console's subprotocol, to a port of the guest dialled by the daemon serving its host.
PORTFORWARD_SUBRESOURCE: Final = "portforward"
# Seconds the daemon waits for the guest's port to accept the connection (past it: 502).
PORTFORWARD_DIAL_TIMEOUT: Final = 10.0
# Bytes read from either side of a forwarded stream per read.
PORTFORWARD_READ_CHUNK: Final = 64 * 1024
# Bytes asked of a TLS socket per read: one record's at most, so a read allocates no more.
TLS_READ_CHUNK: Final = 16 * 1024
# Bytes a forwarded stream takes from one side per wake-up, reading on while more is ready (a TLS
# read returns one 16 KiB record, and a wake-up per record cost more than the bytes themselves),
# and hands to one TLS send. Under the daemon's fixed mmap threshold (MMAP_THRESHOLD_BYTES, 256 KiB)
# so that a batch's buffers come from the heap: mapped ones cost their page faults every time.
PORTFORWARD_BATCH: Final = 128 * 1024
# Bytes for the guest a stream holds while the guest is slow to read; past them, reading from the
# client pauses.
PORTFORWARD_BUFFER: Final = 1 << 20
# The port `kubectl vm ssh` reaches unless told otherwise.
SSH_PORT: Final = 22
# The port-forward subprotocol with a half-close (docs/console.md): the console's binary frames,
# and an empty binary frame from the client says its input ended, as a TCP FIN would; the daemon
# then shuts the guest connection's writing side and carries the guest's answer until the guest
# closes. The daemon falls back to the console's subprotocol for a client that offers only that.
PORTFORWARD_SUBPROTOCOL: Final = "v1.portforward.infrastructure.vm-api.io"
# What the plugin offers, preferred first.
PORTFORWARD_SUBPROTOCOLS: Final = (PORTFORWARD_SUBPROTOCOL, CONSOLE_SUBPROTOCOL)

# The hop between daemons (docs/console.md, "Routing"): a daemon that receives a request for a
# machine on a host it does not serve forwards it, over mutual TLS, to the daemon serving that
# host. Each daemon with --console-hop-port publishes where it takes hops in its hosts' heartbeat
# Leases, under this annotation ("ADDRESS:PORT", "[IPv6]:PORT").
HOP_ADDRESS_ANNOTATION: Final = "infrastructure.vm-api.io/console-hop-address"
# The DNS name both ends of a hop must carry in their certificate (signed by --console-hop-ca-file):
# the console Service's, which every daemon's serving certificate already names.
HOP_PEER_NAME: Final = "libvirt-provider-console.vm-api-system.svc"
# Seconds to connect to, and finish TLS with, the daemon serving the machine's host.
HOP_CONNECT_TIMEOUT: Final = 5.0
# Seconds a `kubectl vm top` list waits for the other daemons' answers (asked all at once); a
# host whose daemon is later is named in the list's partialHosts.
STATS_FANOUT_SECONDS: Final = 15.0
# Bytes read from either end of a hop per read, and bytes held for an end that is slow to read
# (past them, reading from the other end pauses).
HOP_READ_CHUNK: Final = 64 * 1024
HOP_BUFFER: Final = 1 << 20

# The plugin's side of its WebSockets: the largest frame it takes from the server, and seconds it
# waits for the server's close frame after sending its own before it gives up on the stream.
PLUGIN_MAX_FRAME: Final = 16 << 20
PLUGIN_CLOSE_WAIT: Final = 5.0

# `kubectl vm top`'s resource in the same aggregated group (docs/console.md, "kubectl vm top"):
# get and list, namespaced and across namespaces, as metrics.k8s.io serves `kubectl top`. The
# daemon authorises each namespace it answers for as a read of the LibvirtMachines themselves.
STATS_RESOURCE: Final = "libvirtmachinestats"
STATS_KIND: Final = "LibvirtMachineStats"
STATS_LIST_KIND: Final = "LibvirtMachineStatsList"
# The one field selector the list takes: the machines of one host.
STATS_HOST_FIELD: Final = "spec.host"
# Seconds `kubectl vm top` waits between its two samples by default (CPU use is a rate).
TOP_INTERVAL_SECONDS: Final = 1.0
# (connect, read) seconds of each of its requests: over the daemon's 5 s statistics deadline.
TOP_REQUEST_TIMEOUT: Final = (10.0, 30.0)

# Seconds after a start within which the host admits no machine until every machine listed with a
# domain here has been counted (`machine/reconciler.py`); past it, it admits against what it has.
ADMISSION_COUNTING_SECONDS: Final = 120.0

# -- LibvirtSnapshot (docs/snapshots.md) ----------------------------------------------------------
SNAPSHOT_KIND: Final = "LibvirtSnapshot"
SNAPSHOT_SHORT_NAMES: Final = ("lvsnap", "lvsnaps")
# Kept while the snapshot's volumes exist; removed once they are deleted.
SNAPSHOT_FINALIZER: Final = f"{GROUP}/libvirt-snapshot"
# The boot disk's name in a snapshot's spec.disks and status.disks: a VM's data disks are DNS
# labels (lower case), so this name can never be one of theirs.
SNAPSHOT_BOOT_DISK: Final = "bootDisk"
# Every volume of a snapshot is named `snap-<uid>-...`: the snapshot's identity in the name, so
# no other object's volume can be aimed at, and a pool listing finds all of one snapshot's.
SNAPSHOT_VOLUME_PREFIX: Final = "snap-"
# The snapshot's one condition, and its reasons (every state has one).
SNAPSHOT_CONDITION_READY: Final = "Ready"
SNAPSHOT_REASON_TAKING: Final = "InProgress"
SNAPSHOT_REASON_READY: Final = "SnapshotReady"
SNAPSHOT_REASON_SOURCE_NOT_FOUND: Final = "SourceNotFound"
SNAPSHOT_REASON_SOURCE_NOT_LINKED: Final = "SourceNotLinked"
SNAPSHOT_REASON_SOURCE_NOT_BUILT: Final = "SourceNotBuilt"
SNAPSHOT_REASON_UNKNOWN_DISK: Final = "UnknownDisk"
SNAPSHOT_REASON_HOST_UNREACHABLE: Final = "HostUnreachable"
SNAPSHOT_REASON_POOL_FULL: Final = "PoolFull"
SNAPSHOT_REASON_AGENT_UNAVAILABLE: Final = "GuestAgentUnavailable"
SNAPSHOT_REASON_FAILED: Final = "SnapshotFailed"
SNAPSHOT_REASON_DELETING: Final = "Deleting"
# Deleting waits while other volumes (clones' disks, snapshots of clones) are overlays on this
# snapshot's copies: the condition names them, the finalizer stays until they are gone.
SNAPSHOT_REASON_IN_USE: Final = "InUse"
# Event reasons of a snapshot (besides the condition reasons, posted when they are first set).
EVENT_SNAPSHOT_TAKEN: Final = "SnapshotTaken"
EVENT_SNAPSHOT_RECOVERED: Final = "SnapshotRecovered"
EVENT_SNAPSHOT_VOLUMES_DELETED: Final = "SnapshotVolumesDeleted"
# Seconds a block commit (merging the writes made while a running machine's disks were copied
# back into its own volumes) may take before the pass gives up and retries.
SNAPSHOT_COMMIT_TIMEOUT_SECONDS: Final = 120.0
# Seconds a preempted spot machine's guest is given to shut down before it is powered off
# (`--preemption-grace`; docs/placement.md).
PREEMPTION_GRACE_SECONDS: Final = 30

# -- LibvirtRestore (docs/snapshots.md, "Restore in place") --------------------------------------
RESTORE_KIND: Final = "LibvirtRestore"
RESTORE_PLURAL: Final = "libvirtrestores"
RESTORE_SHORT_NAMES: Final = ("lvrestore", "lvrestores")
# Kept while the restore may hold its machine off; removed once the hold is released.
RESTORE_FINALIZER: Final = f"{GROUP}/libvirt-restore"
# What a restore does with a machine that runs (spec.whenRunning).
RESTORE_WHEN_RUNNING_POWER_OFF: Final = "PowerOff"
RESTORE_WHEN_RUNNING_WAIT: Final = "WaitForPowerOff"
# Its phases (status.phase), in order; Failed ends a restore that cannot be done.
RESTORE_PHASE_PENDING: Final = "Pending"
RESTORE_PHASE_WAITING: Final = "WaitingForPowerOff"
RESTORE_PHASE_POWERING_OFF: Final = "PoweringOff"
RESTORE_PHASE_RESTORING: Final = "Restoring"
RESTORE_PHASE_SUCCEEDED: Final = "Succeeded"
RESTORE_PHASE_FAILED: Final = "Failed"
# The restore's one condition, and its reasons.
RESTORE_CONDITION_SUCCEEDED: Final = "Succeeded"
RESTORE_REASON_IN_PROGRESS: Final = "InProgress"
RESTORE_REASON_WAITING_FOR_POWER_OFF: Final = "WaitingForPowerOff"
RESTORE_REASON_RESTORED: Final = "Restored"
RESTORE_REASON_SNAPSHOT_NOT_FOUND: Final = "SnapshotNotFound"
RESTORE_REASON_SNAPSHOT_NOT_READY: Final = "SnapshotNotReady"
RESTORE_REASON_SNAPSHOT_OF_ANOTHER_MACHINE: Final = "SnapshotOfAnotherMachine"
RESTORE_REASON_MACHINE_NOT_FOUND: Final = "MachineNotFound"
RESTORE_REASON_MACHINE_NOT_BUILT: Final = "MachineNotBuilt"
RESTORE_REASON_UNSUPPORTED_DISK: Final = "UnsupportedDisk"
RESTORE_REASON_ANOTHER_RESTORE: Final = "AnotherRestoreInProgress"
RESTORE_REASON_HOST_UNREACHABLE: Final = "HostUnreachable"
RESTORE_REASON_FAILED: Final = "RestoreFailed"
# Events on the machine's LibvirtMachine (the restore's own carry the condition reasons).
EVENT_RESTORE_HOLD: Final = "HeldForRestore"
EVENT_RESTORED: Final = "Restored"
# The machine's controller reports a machine held off for a restore with this reason.
REASON_HELD_FOR_RESTORE: Final = "HeldForRestore"

# -- LibvirtMigration (docs/migration.md) ---------------------------------------------------------
MIGRATION_KIND: Final = "LibvirtMigration"
MIGRATION_PLURAL: Final = "libvirtmigrations"
MIGRATION_SHORT_NAMES: Final = ("lvmig", "lvmigs")
# The migration's phases (status.phase), in the order a successful one passes them.
MIGRATION_PHASE_PENDING: Final = "Pending"
MIGRATION_PHASE_SCHEDULING: Final = "Scheduling"
MIGRATION_PHASE_PREPARING: Final = "Preparing"
MIGRATION_PHASE_MIGRATING: Final = "Migrating"
MIGRATION_PHASE_SUCCEEDED: Final = "Succeeded"
MIGRATION_PHASE_FAILED: Final = "Failed"
MIGRATION_PHASE_CANCELLED: Final = "Cancelled"
# Kept on a migration while a host may still hold something of it (the target's pre-created
# volumes, a running job on the source): deleting the migration cancels it first.
MIGRATION_FINALIZER: Final = f"{GROUP}/libvirt-migration"
# The migration's one condition, and its reasons (every state has one).
MIGRATION_CONDITION_SUCCEEDED: Final = "Succeeded"
MIGRATION_REASON_PENDING: Final = "Pending"
MIGRATION_REASON_PREPARING: Final = "PreparingTarget"
MIGRATION_REASON_WAITING_FOR_IMAGE: Final = "WaitingForImage"
MIGRATION_REASON_MIGRATING: Final = "Migrating"
MIGRATION_REASON_HANDING_OVER: Final = "HandingOver"
MIGRATION_REASON_SUCCEEDED: Final = "Migrated"
MIGRATION_REASON_MACHINE_NOT_FOUND: Final = "MachineNotFound"
MIGRATION_REASON_MACHINE_NOT_RUNNING: Final = "MachineNotRunning"
MIGRATION_REASON_MACHINE_NOT_BOUND: Final = "MachineNotBound"
MIGRATION_REASON_PINNED: Final = "PinnedByFailureDomain"
MIGRATION_REASON_SAME_HOST: Final = "TargetIsSource"
MIGRATION_REASON_TARGET_REQUIRED: Final = "TargetRequired"
MIGRATION_REASON_NO_TARGET: Final = "NoTargetHost"
MIGRATION_REASON_TARGET_NOT_FOUND: Final = "TargetNotFound"
MIGRATION_REASON_TARGET_CORDONED: Final = "TargetCordoned"
MIGRATION_REASON_TARGET_NOT_READY: Final = "TargetNotReady"
MIGRATION_REASON_TARGET_UNSUITABLE: Final = "TargetUnsuitable"
MIGRATION_REASON_TARGET_NOT_MIGRATABLE: Final = "TargetNotSetUpForMigration"
MIGRATION_REASON_ALREADY_MIGRATING: Final = "AlreadyMigrating"
MIGRATION_REASON_MIGRATION_FAILED: Final = "MigrationFailed"
MIGRATION_REASON_CANCELLED: Final = "Cancelled"
# Cancelled because the machine is being deleted: moving it on would only delay its deletion.
MIGRATION_REASON_MACHINE_DELETED: Final = "MachineDeleted"
# Waiting (phase Pending) for a slot: the source host's outbound migrations, or the cluster's.
MIGRATION_REASON_HOST_LIMIT: Final = "WaitingForHostSlot"
MIGRATION_REASON_CLUSTER_LIMIT: Final = "WaitingForClusterSlot"
# Aborted by the source's watchdog (Failed): the bytes left did not shrink for the no-progress
# time, or the copy outlasted its deadline (per GiB of memory and disk to copy).
MIGRATION_REASON_NO_PROGRESS: Final = "NoProgress"
MIGRATION_REASON_DEADLINE_EXCEEDED: Final = "DeadlineExceeded"
# Refused by the source (Failed, nothing copied): the TLS client credentials its libvirtd opens
# the target's with could not be had from --migration-secret (missing, a key missing or not PEM,
# or not readable by the daemon).
MIGRATION_REASON_CREDENTIALS_MISSING: Final = "MigrationCredentialsMissing"
# Event reasons of a migration besides its condition's (posted when first set).
EVENT_MIGRATION_STARTED: Final = "MigrationStarted"
EVENT_MIGRATION_SCHEDULED: Final = "TargetChosen"
EVENT_MIGRATION_TARGET_PREPARED: Final = "TargetPrepared"
EVENT_MIGRATION_SOURCE_CLEANED: Final = "SourceVolumesDeleted"
EVENT_MIGRATION_TARGET_CLEANED: Final = "TargetVolumesDeleted"
EVENT_MIGRATION_TARGET_GONE: Final = "TargetGone"
EVENT_MACHINE_MIGRATED: Final = "Migrated"
# Seconds between two progress writes of a running migration (jobStats on the source).
MIGRATION_PROGRESS_SECONDS: Final = 1.0
# Limits and ends (docs/migration.md, "Limits and ends"; KubeVirt's defaults): outbound
# migrations running at once per source host (--migration-max-per-host) and in the cluster
# (--migration-max-per-cluster); seconds without the bytes left shrinking before the job is
# aborted (--migration-no-progress-timeout); seconds per GiB of memory and disk to copy before it
# is aborted (--migration-deadline-per-gib).
MIGRATION_MAX_PER_HOST: Final = 2
MIGRATION_MAX_PER_CLUSTER: Final = 5
MIGRATION_NO_PROGRESS_SECONDS: Final = 150.0
MIGRATION_DEADLINE_SECONDS_PER_GIB: Final = 150.0
# Seconds before a migration waiting for a slot looks again without being woken (a slot freed
# on another host wakes it through the watch; this is the net under a lost event).
MIGRATION_SLOT_RECHECK_SECONDS: Final = 30.0
# How often the source looks whether a deleted migration's target host, which has not cleaned up,
# was deleted meanwhile (an admin giving the host up; host deletions are not watched).
MIGRATION_TARGET_GONE_RECHECK_SECONDS: Final = 5.0
# How often the source looks whether the target still serves while it prepares.
MIGRATION_TARGET_WATCH_SECONDS: Final = 10.0
# The range of the random delay before a source whose slot claim met other hosts' claims tries
# again (`migration/limits.py`: all of them withdrew; spread out, they do not collide again).
MIGRATION_CLAIM_RETRY_SECONDS: Final = (1.0, 5.0)

# -- VNC through the aggregated API (docs/console.md, "VNC and screenshots") -----------------------
# `libvirtmachines/vnc`: the guest's RFB stream over a WebSocket (RBAC: `get` on
# libvirtmachines/vnc), opened through libvirt (virDomainOpenGraphicsFD), never a host port.
VNC_SUBRESOURCE: Final = "vnc"
# The screenshot's path under the vnc subresource (`.../vnc/screenshot`, as KubeVirt's): the API
# server authorises it as `get libvirtmachines/vnc`, the first segment after the name.
VNC_SCREENSHOT_PATH: Final = "screenshot"
# Subprotocols the vnc WebSocket speaks, in the order the daemon prefers them: raw bytes in binary
# frames both ways (virtctl's, and websockify's `binary` as noVNC asks for it).
VNC_SUBPROTOCOLS: Final = ("plain.kubevirt.io", "binary")
# Bytes read from the display's socket per read.
VNC_READ_CHUNK: Final = 64 * 1024
# Seconds a screenshot may take (libvirt's stream of the PPM, then its PNG), end to end.
VNC_SCREENSHOT_TIMEOUT: Final = 30.0
# The audit trail of VNC sessions on the LibvirtMachine (as the console's).
EVENT_VNC_ATTACHED: Final = "VncAttached"
EVENT_VNC_DETACHED: Final = "VncDetached"

# -- Host drain (docs/migration.md, "Draining a host") ---------------------------------------------
# The phases of `LibvirtHost.status.drain.phase`: the plan is published first (Planning), or only
# the plan (Planned, a dry run); then the machines go (Draining) until every one is moved, powered
# off or left stopped (Drained), or the ones left cannot go on (Blocked).
DRAIN_PHASE_PLANNING: Final = "Planning"
DRAIN_PHASE_PLANNED: Final = "Planned"
DRAIN_PHASE_DRAINING: Final = "Draining"
DRAIN_PHASE_DRAINED: Final = "Drained"
DRAIN_PHASE_BLOCKED: Final = "Blocked"
# Each machine's state in the drain's plan (`status.drain.machines[].state`).
DRAIN_MACHINE_PENDING: Final = "Pending"
DRAIN_MACHINE_MIGRATING: Final = "Migrating"
DRAIN_MACHINE_POWERING_OFF: Final = "PoweringOff"
DRAIN_MACHINE_MOVED: Final = "Moved"
DRAIN_MACHINE_POWERED_OFF: Final = "PoweredOff"
DRAIN_MACHINE_STOPPED: Final = "Stopped"
DRAIN_MACHINE_GONE: Final = "Gone"
DRAIN_MACHINE_BLOCKED: Final = "Blocked"
# `LibvirtMachine.spec.evictionStrategy`: what a drain of its host does with it.
EVICTION_LIVE_MIGRATE: Final = "LiveMigrate"
EVICTION_POWER_OFF: Final = "PowerOff"
EVICTION_NONE: Final = "None"
# `LibvirtHost.spec.drain.onCancel`: what a cleared drain does with its running migrations.
DRAIN_ON_CANCEL_FINISH: Final = "Finish"
DRAIN_ON_CANCEL_ABORT: Final = "Abort"
# Failed migrations of one machine before the drain gives it up (Blocked).
DRAIN_MAX_ATTEMPTS: Final = 3
# A drain's LibvirtMigrations carry the drained host's name under this label (and their names
# start with `drain-`), so `kubectl get lvmig -A -l infrastructure.vm-api.io/drain-host=h1`
# lists them.
DRAIN_HOST_LABEL: Final = f"{GROUP}/drain-host"
DRAIN_MIGRATION_PREFIX: Final = "drain-"
# Seconds between two passes of an active drain when nothing wakes it (the migrations' and the
# host's watches wake it sooner).
DRAIN_ACTIVE_SECONDS: Final = 3.0
DRAIN_IDLE_SECONDS: Final = 10.0
# The LibvirtHost's condition for its drain (absent when no drain was asked), and its reasons.
HOST_CONDITION_DRAINED: Final = "Drained"
DRAIN_REASON_PLANNING: Final = "DrainPlanning"
DRAIN_REASON_DRY_RUN: Final = "DrainDryRun"
DRAIN_REASON_DRAINING: Final = "Draining"
DRAIN_REASON_DRAINED: Final = "Drained"
DRAIN_REASON_BLOCKED: Final = "DrainBlocked"
# Events on the LibvirtHost besides the condition's reasons (posted when the phase changes).
EVENT_DRAIN_CANCELLED: Final = "DrainCancelled"
EVENT_DRAIN_CLEARED: Final = "DrainCleared"
EVENT_DRAIN_MIGRATION_CREATED: Final = "DrainMigrationCreated"
EVENT_DRAIN_RETRY: Final = "DrainRetry"
EVENT_DRAIN_POWER_OFF: Final = "DrainPowerOff"
EVENT_DRAIN_MACHINE_BLOCKED: Final = "DrainMachineBlocked"
EVENT_DRAIN_MIGRATION_ABORTED: Final = "DrainMigrationAborted"
