"""The catalog as the resolver takes it, parsed once per object version.

Every reconcile pass (and every placement) resolves against the whole catalog; the objects come
from watch-fed informers, and parsing each one again on every pass would cost more than the rest
of the pass, so an object is parsed once per resourceVersion. An invalid one is logged once and
left out (a machine naming it then reads "not found", with the log saying why).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from pydantic import ValidationError

from catalog.image import LibvirtImage
from catalog.lookup import Catalog
from catalog.machineclass import LibvirtMachineClass
from catalog.network import LibvirtNetwork
from catalog.snapshot_source import SnapshotDiskSource, SnapshotSource
from catalog.storage import LibvirtStorageClass
from catalog.volume_attributes import VolumeAttributesClass
from libvirt_provider import constants as c
from libvirt_provider.errors import NotFoundError
from libvirt_provider.snapshot_api import LibvirtSnapshotStatus

__all__ = ["CatalogReader", "CatalogSource", "snapshot_source"]

log = logging.getLogger(__name__)


class CatalogSource(Protocol):
    def list_cluster(self, plural: str) -> list[dict[str, Any]]: ...


class CatalogReader:
    def __init__(self, store: CatalogSource) -> None:
        self._store = store
        # plural -> name -> (resourceVersion, the parsed model, None when invalid)
        self._parsed: dict[str, dict[str, tuple[str, Any]]] = {}
        self._unserved_logged = False
        # (namespace, name) -> (resourceVersion, the view, None when its status is unreadable)
        self._snapshots: dict[tuple[str, str], tuple[str, SnapshotSource | None]] = {}

    def catalog(self) -> Catalog:
        return Catalog.of(
            images=self._parse_all(c.IMAGE_PLURAL, LibvirtImage),
            machine_classes=self._parse_all(c.MACHINE_CLASS_PLURAL, LibvirtMachineClass),
            networks=self._parse_all(c.NETWORK_PLURAL, LibvirtNetwork),
            storage_classes=self._parse_all(c.STORAGE_CLASS_PLURAL, LibvirtStorageClass),
            volume_attributes_classes=self._volume_attributes_classes(),
            snapshots=self._snapshot_sources(),
        )

    def _snapshot_sources(self) -> list[SnapshotSource]:
        """Every LibvirtSnapshot as a disk source, parsed once per resourceVersion."""
        fresh: dict[tuple[str, str], tuple[str, SnapshotSource | None]] = {}
        for obj in self._store.list_cluster(c.SNAPSHOT_PLURAL):
            meta = obj.get("metadata") or {}
            key = (str(meta.get("namespace")), str(meta.get("name")))
            version = str(meta.get("resourceVersion") or "")
            hit = self._snapshots.get(key)
            if hit is not None and version and hit[0] == version:
                fresh[key] = hit
                continue
            try:
                fresh[key] = (version, snapshot_source(obj))
            except ValidationError as err:
                log.warning("ignoring invalid %s %s/%s: %s", c.SNAPSHOT_PLURAL, *key, err)
                fresh[key] = (version, None)
        self._snapshots = fresh
        return [view for _, view in fresh.values() if view is not None]

    def _volume_attributes_classes(self) -> list[VolumeAttributesClass]:
        """Kubernetes' own kind, served from 1.34 on: an API server that does not serve it has
        none, and only the machines that name a class say so ("not found")."""
        try:
            return self._parse_all(c.VOLUME_ATTRIBUTES_CLASS_PLURAL, VolumeAttributesClass)
        except NotFoundError:
            if not self._unserved_logged:
                log.warning("the API server serves no storage.k8s.io/v1 VolumeAttributesClasses")
                self._unserved_logged = True
            return []

    def _parse_all(self, plural: str, model: Any) -> list[Any]:
        """Every valid object of a catalog kind; an object is parsed once per resourceVersion
        (every pass reads the whole catalog), and an invalid one is logged once and skipped."""
        known = self._parsed.get(plural, {})
        fresh: dict[str, tuple[str, Any]] = {}
        for obj in self._store.list_cluster(plural):
            meta = obj.get("metadata") or {}
            name, version = str(meta.get("name")), str(meta.get("resourceVersion") or "")
            hit = known.get(name)
            if hit is not None and version and hit[0] == version:
                fresh[name] = hit
                continue
            try:
                fresh[name] = (version, model.model_validate(obj))
            except ValidationError as err:
                log.warning("ignoring invalid %s %s: %s", plural, name, err.error_count())
                fresh[name] = (version, None)
        self._parsed[plural] = fresh
        return [parsed for _, parsed in fresh.values() if parsed is not None]


def snapshot_source(obj: dict[str, Any]) -> SnapshotSource:
    """A LibvirtSnapshot object reduced to what a clone reads (ValidationError for a bad status)."""
    meta = obj.get("metadata") or {}
    status = LibvirtSnapshotStatus.model_validate(obj.get("status") or {})
    disks = {
        d.name: SnapshotDiskSource(
            pool=d.pool,
            volume=d.volume,
            format="raw" if d.volume.endswith(".raw") else "qcow2",
            size_bytes=d.size_bytes,
        )
        for d in status.disks or ()
    }
    source_spec = status.source.spec if status.source is not None else {}
    image = ((source_spec.get("bootDisk") or {}).get("source") or {}).get("image") or {}
    return SnapshotSource(
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        uid=str(meta.get("uid") or ""),
        ready=bool(status.ready_to_use),
        deleting=bool(meta.get("deletionTimestamp")),
        host=status.host,
        disks=disks,
        boot_image=str(image["name"]) if isinstance(image, dict) and image.get("name") else None,
    )
