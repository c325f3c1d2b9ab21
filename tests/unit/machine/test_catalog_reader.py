"""The catalog as the resolver takes it: VolumeAttributesClasses read beside the catalog kinds,
and an API server that serves none (before Kubernetes 1.34) is an empty list, not a failure."""

from __future__ import annotations

from typing import Any

from libvirt_provider.constants import VOLUME_ATTRIBUTES_CLASS_PLURAL, VOLUME_ATTRIBUTES_DRIVER
from libvirt_provider.errors import NotFoundError
from libvirt_provider.machine.catalog import CatalogReader


class _Source:
    def __init__(self, *, served: bool) -> None:
        self.served = served

    def list_cluster(self, plural: str) -> list[dict[str, Any]]:
        if plural != VOLUME_ATTRIBUTES_CLASS_PLURAL:
            return []
        if not self.served:
            raise NotFoundError("the server could not find the requested resource")
        return [
            {
                "metadata": {"name": "slow", "resourceVersion": "7"},
                "driverName": VOLUME_ATTRIBUTES_DRIVER,
                "parameters": {"readIOPS": "10"},
            }
        ]


def test_volume_attributes_classes_are_read_with_the_catalog() -> None:
    catalog = CatalogReader(_Source(served=True)).catalog()
    assert catalog.volume_attributes_classes["slow"].parameters == {"readIOPS": "10"}


def test_an_api_server_without_the_kind_has_no_classes() -> None:
    catalog = CatalogReader(_Source(served=False)).catalog()
    assert catalog.volume_attributes_classes == {}
