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
from catalog.storage import LibvirtStorageClass
from catalog.volume_attributes import VolumeAttributesClass
from libvirt_provider import constants as c
from libvirt_provider.errors import NotFoundError

__all__ = ["CatalogReader", "CatalogSource"]

log = logging.getLogger(__name__)


class CatalogSource(Protocol):
    def list_cluster(self, plural: str) -> list[dict[str, Any]]: ...


class CatalogReader:
    def __init__(self, store: CatalogSource) -> None:
        self._store = store
        # plural -> name -> (resourceVersion, the parsed model, None when invalid)
        self._parsed: dict[str, dict[str, tuple[str, Any]]] = {}
        self._unserved_logged = False

    def catalog(self) -> Catalog:
        return Catalog.of(
            images=self._parse_all(c.IMAGE_PLURAL, LibvirtImage),
            machine_classes=self._parse_all(c.MACHINE_CLASS_PLURAL, LibvirtMachineClass),
            networks=self._parse_all(c.NETWORK_PLURAL, LibvirtNetwork),
            storage_classes=self._parse_all(c.STORAGE_CLASS_PLURAL, LibvirtStorageClass),
            volume_attributes_classes=self._volume_attributes_classes(),
        )

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
