"""The catalog informer against the real API server: listed once, then kept current by its watch."""

from __future__ import annotations

import time
import uuid
from typing import Any

from kubernetes import client

from generic.adapters.informer import ClusterInformer
from tests.support.kube import GROUP, V, install_api
from tests.support.lab_access import LabInfo
from tests.support.waiting import eventually


def _image(name: str, volume: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{V}",
        "kind": "LibvirtImage",
        "metadata": {"name": name},
        "spec": {"source": {"volume": {"pool": "vmapi-lab", "volume": volume}}},
    }


def _volume(informer: ClusterInformer, name: str) -> str | None:
    for obj in informer.items() or []:
        if obj["metadata"]["name"] == name:
            return str(obj["spec"]["source"]["volume"]["volume"])
    return None


def test_the_informer_follows_creation_change_and_deletion(
    lab: LabInfo, api_client: client.ApiClient
) -> None:
    install_api(lab, api_client)
    custom = client.CustomObjectsApi(api_client)
    changes: list[tuple[str, str | None]] = []

    def seen(event_type: str, obj: dict[str, Any] | None) -> None:
        # Told after the copy changed: what the informer hands out already has it.
        name = obj["metadata"]["name"] if obj else None
        if event_type == "DELETED":
            assert name not in {o["metadata"]["name"] for o in informer.items() or []}
        elif name is not None:
            assert _volume(informer, name) == obj["spec"]["source"]["volume"]["volume"]
        changes.append((event_type, name))

    informer = ClusterInformer(
        api_client, group=GROUP, version=V, plural="libvirtimages", on_change=seen
    )
    name = "informed-" + uuid.uuid4().hex[:6]
    informer.start()
    try:
        assert informer.wait_synced(30), "the first list"
        listed = {o["metadata"]["name"] for o in informer.items() or []}
        assert "test-guest" in listed  # the sample catalog, there before the informer started

        custom.create_cluster_custom_object(GROUP, V, "libvirtimages", _image(name, "a.qcow2"))
        eventually(lambda: _volume(informer, name) == "a.qcow2", timeout=10, what="created")
        custom.patch_cluster_custom_object(
            GROUP, V, "libvirtimages", name, {"spec": {"source": {"volume": {"volume": "b.qcow2"}}}}
        )
        eventually(lambda: _volume(informer, name) == "b.qcow2", timeout=10, what="changed")
        custom.delete_cluster_custom_object(GROUP, V, "libvirtimages", name)
        eventually(
            lambda: name not in {o["metadata"]["name"] for o in informer.items() or []},
            timeout=10,
            what="deleted",
        )
        mine = [event_type for event_type, seen_name in changes if seen_name == name]
        assert mine == ["ADDED", "MODIFIED", "DELETED"], changes
    finally:
        started = time.monotonic()
        informer.stop()
        assert time.monotonic() - started < 6
