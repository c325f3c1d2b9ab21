"""CRDs of the `infrastructure.vm-api.io` group, generated from the pydantic models (pure).

The models are the one source of truth; the generator is `generic.crdgen`, shared with the
VirtualMachine CRD. Writing the files is `python -m libvirt_provider.crds` (`__main__.py`).
"""

from __future__ import annotations

from pathlib import Path

from catalog.image import LibvirtImageSpec, LibvirtImageStatus
from catalog.machineclass import LibvirtMachineClassSpec
from catalog.network import LibvirtNetworkSpec
from catalog.storage import LibvirtStorageClassSpec
from generic.constants import CATEGORY, CONDITION_INFRASTRUCTURE_READY
from generic.crdgen import CrdSpec, PrinterColumn, build_crd, render_yaml
from libvirt_provider import constants as c
from libvirt_provider.api import LibvirtMachineSpec, LibvirtMachineStatus
from libvirt_provider.host_api import LibvirtHostSpec, LibvirtHostStatus
from libvirt_provider.migration_api import LibvirtMigrationSpec, LibvirtMigrationStatus
from libvirt_provider.restore_api import LibvirtRestoreSpec, LibvirtRestoreStatus
from libvirt_provider.snapshot_api import LibvirtSnapshotSpec, LibvirtSnapshotStatus

__all__ = ["CRDS", "CRD_DIR", "crd_path", "crd_yaml"]

CRD_DIR = Path(__file__).resolve().parents[2] / "crds"
CATALOG_CATEGORY = "libvirt-catalog"
_READY = f'.status.conditions[?(@.type=="{CONDITION_INFRASTRUCTURE_READY}")]'

LIBVIRT_MACHINE = CrdSpec(
    group=c.GROUP,
    version=c.VERSION,
    kind=c.MACHINE_KIND,
    plural=c.MACHINE_PLURAL,
    singular="libvirtmachine",
    description=(
        "A libvirt domain on one host, realising the vm-api.io VirtualMachine named by the "
        "annotation vm-api.io/virtual-machine. The spec holds provider-only settings (owned by "
        "the user); the status follows the vm-api.io provider status contract (owned by the "
        "controller)."
    ),
    spec_model=LibvirtMachineSpec,
    status_model=LibvirtMachineStatus,
    short_names=c.MACHINE_SHORT_NAMES,
    # Each host's daemon selects its machines by spec.host (immutable), not by the label.
    selectable_fields=(".spec.host",),
    categories=(CATEGORY, "libvirt"),
    labels={c.VM_API_CRD_LABEL: c.VM_API_CRD_LABEL_VALUE},
    printer_columns=(
        PrinterColumn("Host", ".spec.host", description="Host that runs the domain"),
        PrinterColumn("Power", ".status.powerState", description="Observed power state"),
        PrinterColumn("Ready", f"{_READY}.status", description="InfrastructureReady"),
        PrinterColumn("Reason", f"{_READY}.reason", description="Why (not) ready"),
        PrinterColumn(
            "IP",
            '.status.addresses[?(@.type=="InternalIP")].address',
            description="Guest addresses",
            priority=1,
        ),
        PrinterColumn("Provider-ID", ".status.providerID", priority=1),
    ),
    spec_required=False,
    root_rules=(
        {
            # The binding's authority (docs/migration.md): spec.host changes only to the target
            # a migration recorded in status.migration, which only the daemons can write (the
            # status subresource; tenants are given no RBAC on it).
            "rule": "!has(oldSelf.spec) || !has(oldSelf.spec.host) || "
            "(has(self.spec) && has(self.spec.host) && (self.spec.host == oldSelf.spec.host || "
            "(has(oldSelf.status) && has(oldSelf.status.migration) && "
            "self.spec.host == oldSelf.status.migration.target)))",
            "message": "host is immutable once set: only a LibvirtMigration moves a machine",
        },
    ),
)

LIBVIRT_IMAGE = CrdSpec(
    group=c.GROUP,
    version=c.VERSION,
    kind=c.IMAGE_KIND,
    plural=c.IMAGE_PLURAL,
    singular="libvirtimage",
    description=(
        "A boot or data disk image for libvirt machines: an http(s) URL with its SHA-256, or a "
        "volume already in a pool; its format, firmware and guest hints. Cluster-scoped."
    ),
    spec_model=LibvirtImageSpec,
    status_model=LibvirtImageStatus,
    scope="Cluster",
    categories=(CATALOG_CATEGORY,),
    printer_columns=(
        PrinterColumn("Format", ".spec.format"),
        PrinterColumn("Firmware", ".spec.firmware.type"),
        PrinterColumn("URL", ".spec.source.http.url", priority=1),
        PrinterColumn("Pool", ".spec.source.volume.pool", priority=1),
        PrinterColumn("Volume", ".spec.source.volume.volume", priority=1),
    ),
)

LIBVIRT_MACHINE_CLASS = CrdSpec(
    group=c.GROUP,
    version=c.VERSION,
    kind=c.MACHINE_CLASS_KIND,
    plural=c.MACHINE_CLASS_PLURAL,
    singular="libvirtmachineclass",
    description=(
        "A sizing profile named by a VirtualMachine's spec.instanceType.name: vCPUs, memory, "
        "CPU mode, topology and huge pages. Cluster-scoped."
    ),
    spec_model=LibvirtMachineClassSpec,
    scope="Cluster",
    categories=(CATALOG_CATEGORY,),
    printer_columns=(
        PrinterColumn("CPUs", ".spec.cpus", type="integer"),
        PrinterColumn("Memory", ".spec.memory"),
        PrinterColumn("CPU-Mode", ".spec.cpu.mode"),
    ),
)

LIBVIRT_NETWORK = CrdSpec(
    group=c.GROUP,
    version=c.VERSION,
    kind=c.NETWORK_KIND,
    plural=c.NETWORK_PLURAL,
    singular="libvirtnetwork",
    description=(
        "What a VirtualMachine interface's network reference means on a host: a libvirt "
        "network, a Linux bridge or a macvtap device; the NIC model and the address source to "
        "trust. Cluster-scoped."
    ),
    spec_model=LibvirtNetworkSpec,
    scope="Cluster",
    categories=(CATALOG_CATEGORY,),
    printer_columns=(
        PrinterColumn("Network", ".spec.source.network"),
        PrinterColumn("Bridge", ".spec.source.bridge"),
        PrinterColumn("Device", ".spec.source.direct.device"),
        PrinterColumn("Default", ".spec.default", type="boolean"),
    ),
)

LIBVIRT_STORAGE_CLASS = CrdSpec(
    group=c.GROUP,
    version=c.VERSION,
    kind=c.STORAGE_CLASS_KIND,
    plural=c.STORAGE_CLASS_PLURAL,
    singular="libvirtstorageclass",
    description=(
        "Maps a disk's storageClassName (this object's name) to a libvirt storage pool, the same "
        "on every host or overridden per host. Cluster-scoped."
    ),
    spec_model=LibvirtStorageClassSpec,
    scope="Cluster",
    categories=(CATALOG_CATEGORY,),
    printer_columns=(
        PrinterColumn("Pool", ".spec.pool"),
        PrinterColumn("Format", ".spec.volumeFormat"),
        PrinterColumn("Default", ".spec.default", type="boolean"),
    ),
)

_HOST_READY = f'.status.conditions[?(@.type=="{c.HOST_CONDITION_READY}")]'

LIBVIRT_HOST = CrdSpec(
    group=c.GROUP,
    version=c.VERSION,
    kind=c.HOST_KIND,
    plural=c.HOST_PLURAL,
    singular="libvirthost",
    description=(
        "A KVM host that runs libvirt machines: what it has (capacity), what may be placed there "
        "(allocatable, after overcommit and reservations), what is placed there (allocated) and "
        "whether its daemon is alive (Ready, and a heartbeat Lease). Created and kept current by "
        "the host's daemon; the spec (cordon, drain, overcommit, reservations) and labels (a "
        "zone) are the user's. Cluster-scoped."
    ),
    spec_model=LibvirtHostSpec,
    status_model=LibvirtHostStatus,
    scope="Cluster",
    short_names=c.HOST_SHORT_NAMES,
    categories=("libvirt",),
    printer_columns=(
        PrinterColumn("Ready", f"{_HOST_READY}.status", description="The daemon runs"),
        PrinterColumn("Cordoned", ".spec.unschedulable", type="boolean"),
        PrinterColumn("CPUs", ".status.summary.cpus", description="allocated/allocatable"),
        PrinterColumn("Memory", ".status.summary.memory", description="allocated/allocatable"),
        PrinterColumn("Machines", ".status.allocated.machines", type="integer"),
        PrinterColumn("Zone", ".metadata.labels.topology\\.kubernetes\\.io/zone"),
        PrinterColumn("Drain", ".status.drain.phase"),
        PrinterColumn("Progress", ".status.drain.message", priority=1),
        PrinterColumn("Libvirt", ".status.versions.libvirt", priority=1),
        PrinterColumn("Qemu", ".status.versions.hypervisor", priority=1),
    ),
    spec_required=False,
    root_rules=(
        {
            "rule": f"self.metadata.name.size() <= {c.HOST_NAME_MAX_LENGTH}",
            "message": f"a host's name is at most {c.HOST_NAME_MAX_LENGTH} characters: it is the "
            f"value of the {c.HOST_LABEL} label",
        },
    ),
)

_SNAPSHOT_READY = f'.status.conditions[?(@.type=="{c.SNAPSHOT_CONDITION_READY}")]'

LIBVIRT_SNAPSHOT = CrdSpec(
    group=c.GROUP,
    version=c.VERSION,
    kind=c.SNAPSHOT_KIND,
    plural=c.SNAPSHOT_PLURAL,
    singular="libvirtsnapshot",
    description=(
        "A point-in-time copy of a VirtualMachine's disks (all, or those named), taken on the "
        "host that runs it without stopping it, that stands on its own: deleting the machine "
        "never touches it. Its volumes are overlays on the machine's image holding only what "
        "the machine wrote. The spec is immutable; the status is the controller's."
    ),
    spec_model=LibvirtSnapshotSpec,
    status_model=LibvirtSnapshotStatus,
    short_names=c.SNAPSHOT_SHORT_NAMES,
    categories=(CATEGORY, "libvirt"),
    printer_columns=(
        PrinterColumn("Source", ".spec.virtualMachineName", description="The VirtualMachine"),
        PrinterColumn("Host", ".status.host", description="Host holding the volumes"),
        PrinterColumn("Ready", ".status.readyToUse", type="boolean"),
        PrinterColumn("Consistency", ".status.consistency", description="Achieved"),
        PrinterColumn("Size", ".status.sizeBytes", type="integer", description="Bytes in pools"),
        PrinterColumn("Reason", f"{_SNAPSHOT_READY}.reason", priority=1),
        PrinterColumn("Taken", ".status.creationTime", type="date", priority=1),
    ),
)

_RESTORE_DONE = f'.status.conditions[?(@.type=="{c.RESTORE_CONDITION_SUCCEEDED}")]'

LIBVIRT_RESTORE = CrdSpec(
    group=c.GROUP,
    version=c.VERSION,
    kind=c.RESTORE_KIND,
    plural=c.RESTORE_PLURAL,
    singular="libvirtrestore",
    description=(
        "Rolls a VirtualMachine back to one of its own LibvirtSnapshots in place: the machine "
        "is held off (powered off, or waited for), each disk the snapshot holds becomes the "
        "snapshot's content, and the machine returns to the power state its VirtualMachine asks "
        "for. The spec is immutable; the status is the controller's."
    ),
    spec_model=LibvirtRestoreSpec,
    status_model=LibvirtRestoreStatus,
    short_names=c.RESTORE_SHORT_NAMES,
    categories=(CATEGORY, "libvirt"),
    printer_columns=(
        PrinterColumn("Snapshot", ".spec.snapshotName", description="The LibvirtSnapshot"),
        PrinterColumn("Machine", ".spec.virtualMachineName", description="The VirtualMachine"),
        PrinterColumn("Phase", ".status.phase"),
        PrinterColumn("Reason", f"{_RESTORE_DONE}.reason"),
        PrinterColumn("Host", ".status.host", priority=1),
        PrinterColumn("Completed", ".status.completionTime", type="date", priority=1),
    ),
)

_MIGRATION_DONE = f'.status.conditions[?(@.type=="{c.MIGRATION_CONDITION_SUCCEEDED}")]'

LIBVIRT_MIGRATION = CrdSpec(
    group=c.GROUP,
    version=c.VERSION,
    kind=c.MIGRATION_KIND,
    plural=c.MIGRATION_PLURAL,
    singular="libvirtmigration",
    description=(
        "A live migration of one running LibvirtMachine to another host, with its local disks: "
        "the target's daemon prepares the machine's volumes, the source's daemon runs libvirt's "
        "peer-to-peer, TLS-encrypted migration, then the machine's host becomes the target. "
        "The spec is immutable; deleting a running migration cancels it."
    ),
    spec_model=LibvirtMigrationSpec,
    status_model=LibvirtMigrationStatus,
    short_names=c.MIGRATION_SHORT_NAMES,
    categories=(CATEGORY, "libvirt"),
    printer_columns=(
        PrinterColumn("Machine", ".spec.machineName", description="The LibvirtMachine"),
        PrinterColumn("Phase", ".status.phase"),
        PrinterColumn("Source", ".status.source"),
        PrinterColumn("Target", ".status.target"),
        PrinterColumn("Reason", f"{_MIGRATION_DONE}.reason"),
        PrinterColumn(
            "Downtime-ms", ".status.result.downtimeMilliseconds", type="integer", priority=1
        ),
        PrinterColumn(
            "Disk-Remaining", ".status.progress.diskRemaining", type="integer", priority=1
        ),
        PrinterColumn(
            "Memory-Remaining", ".status.progress.memoryRemaining", type="integer", priority=1
        ),
    ),
)

CRDS: tuple[CrdSpec, ...] = (
    LIBVIRT_MACHINE,
    LIBVIRT_IMAGE,
    LIBVIRT_MACHINE_CLASS,
    LIBVIRT_NETWORK,
    LIBVIRT_STORAGE_CLASS,
    LIBVIRT_HOST,
    LIBVIRT_SNAPSHOT,
    LIBVIRT_RESTORE,
    LIBVIRT_MIGRATION,
)


def crd_path(spec: CrdSpec) -> Path:
    return CRD_DIR / f"{spec.group}_{spec.plural}.yaml"


def crd_yaml(spec: CrdSpec) -> str:
    return render_yaml(build_crd(spec), generator_module="libvirt_provider.crds")
