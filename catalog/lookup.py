"""Pure lookups over catalog objects that a caller has already read.

The caller (a controller shell) lists the catalog kinds and hands them in; these helpers only find
by name and pick defaults. They never fetch, and they never choose when a choice is ambiguous: two
objects marked `default` is an answer of "ambiguous", not "the first one".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from catalog.image import LibvirtImage
from catalog.machineclass import LibvirtMachineClass
from catalog.network import LibvirtNetwork
from catalog.snapshot_source import SnapshotSource
from catalog.storage import LibvirtStorageClass
from catalog.volume_attributes import VolumeAttributesClass

__all__ = ["AmbiguousDefaultError", "Catalog"]


class AmbiguousDefaultError(LookupError):
    """More than one catalog object of a kind is marked `default`."""

    def __init__(self, kind: str, names: list[str]) -> None:
        super().__init__(f"several {kind} objects are marked default: {', '.join(sorted(names))}")
        self.kind = kind
        self.names = names


@dataclass(frozen=True)
class Catalog:
    """Catalog objects by name, as read by the caller."""

    images: dict[str, LibvirtImage] = field(default_factory=dict)
    machine_classes: dict[str, LibvirtMachineClass] = field(default_factory=dict)
    networks: dict[str, LibvirtNetwork] = field(default_factory=dict)
    storage_classes: dict[str, LibvirtStorageClass] = field(default_factory=dict)
    volume_attributes_classes: dict[str, VolumeAttributesClass] = field(default_factory=dict)
    snapshots: dict[tuple[str, str], SnapshotSource] = field(default_factory=dict)
    """LibvirtSnapshots by (namespace, name): namespaced, unlike the catalog kinds above, and
    found only in the namespace of the machine that names one."""

    @classmethod
    def of(
        cls,
        *,
        images: Iterable[LibvirtImage] = (),
        machine_classes: Iterable[LibvirtMachineClass] = (),
        networks: Iterable[LibvirtNetwork] = (),
        storage_classes: Iterable[LibvirtStorageClass] = (),
        volume_attributes_classes: Iterable[VolumeAttributesClass] = (),
        snapshots: Iterable[SnapshotSource] = (),
    ) -> Catalog:
        return cls(
            images={o.metadata.name: o for o in images},
            machine_classes={o.metadata.name: o for o in machine_classes},
            networks={o.metadata.name: o for o in networks},
            storage_classes={o.metadata.name: o for o in storage_classes},
            volume_attributes_classes={o.metadata.name: o for o in volume_attributes_classes},
            snapshots={(o.namespace, o.name): o for o in snapshots},
        )

    def default_network(self) -> LibvirtNetwork | None:
        """The network marked default; None when there is none; raises when there are several."""
        found = [n for n in self.networks.values() if n.spec.default]
        if len(found) > 1:
            raise AmbiguousDefaultError("LibvirtNetwork", [n.metadata.name for n in found])
        return found[0] if found else None

    def default_storage_class(self) -> LibvirtStorageClass | None:
        """The storage class marked default; None when there is none; raises when several."""
        found = [s for s in self.storage_classes.values() if s.spec.default]
        if len(found) > 1:
            raise AmbiguousDefaultError("LibvirtStorageClass", [s.metadata.name for s in found])
        return found[0] if found else None
