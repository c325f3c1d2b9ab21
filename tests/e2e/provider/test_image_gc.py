"""Cached base images: kept while a LibvirtImage or a volume uses them, deleted once nothing does.

"Kept" is only shown after a pass of the daemon's image cache has looked: the tests poke the cache
(a throwaway LibvirtImage appears, which asks every daemon for a pass) and wait until the daemon's
metrics say a pass that began after the poke has completed.
"""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import libvirt
import pytest
from kubernetes import client

from tests.support.factories import pair
from tests.support.images import (
    Server,
    base_volumes,
    create_image,
    delete_image,
    drop_base,
    host_entry,
    serve_guest,
)
from tests.support.kube import GROUP, VM_GROUP, V, create, domain_of, get, wait_ready
from tests.support.lab_access import LabInfo
from tests.support.virt import domain_names
from tests.support.waiting import eventually

LAST_PASS = "vmapi_libvirt_image_cache_last_pass_timestamp_seconds"
# A machine that got its base moments before stays protected for the importer's grace: 5 s here
# (`--image-handout-grace`, 60 s by default), so a deletion is seen within seconds, not a minute.
HANDOUT_GRACE = 5
DAEMON_ARGS = (f"--image-handout-grace={HANDOUT_GRACE}",)
GONE_TIMEOUT = 120


@dataclass(frozen=True)
class Cache:
    """What the tests touch: the API, libvirt, the lab and the daemon's health/metrics URL."""

    api: client.ApiClient
    virt: libvirt.virConnect
    lab: LabInfo
    daemon: str


@pytest.fixture
def cache(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, daemon: str
) -> Cache:
    return Cache(api_client, virt, lab, daemon)


@pytest.fixture
def served(lab: LabInfo, tmp_path: Path) -> Iterator[tuple[Server, str]]:
    server, sha256 = serve_guest(lab, tmp_path)
    yield server, sha256
    server.httpd.shutdown()


def _last_pass(daemon: str) -> float:
    with urllib.request.urlopen(f"{daemon}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    found = re.search(rf"^{LAST_PASS} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _after_a_pass(api_client: client.ApiClient, lab: LabInfo, daemon: str) -> None:
    """Return once the daemon completed a pass that began after this call did."""
    began = time.time()
    poke = "gc-poke-" + uuid.uuid4().hex[:6]
    custom = client.CustomObjectsApi(api_client)
    custom.create_cluster_custom_object(
        GROUP,
        V,
        "libvirtimages",
        {
            "apiVersion": f"{GROUP}/{V}",
            "kind": "LibvirtImage",
            "metadata": {"name": poke},
            "spec": {"source": {"volume": {"pool": lab.pool, "volume": lab.guest_volume}}},
        },
    )
    try:
        eventually(
            lambda: _last_pass(daemon) >= began,
            timeout=60,
            what="an image cache pass after the poke",
        )
    finally:
        delete_image(api_client, poke)


def _machine_on(api_client: client.ApiClient, ns: str, vm: str, image: str) -> None:
    docs = pair(ns, vm)
    docs[0]["spec"]["bootDisk"]["source"]["image"]["name"] = image
    create(api_client, docs)
    wait_ready(api_client, ns, vm, timeout=300, what=f"VM {vm} Ready on the imported image")


def _delete_machine(api_client: client.ApiClient, ns: str, vm: str) -> None:
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        VM_GROUP, V, ns, "virtualmachines", vm
    )
    eventually(
        lambda: (
            get(api_client, ns, vm, vm=True) is None and get(api_client, ns, vm, vm=False) is None
        ),
        timeout=120,
        what=f"VM {vm} and its LibvirtMachine gone",
    )


def test_a_base_outlives_its_machine_and_goes_with_its_image(
    cache: Cache, ns: str, served: tuple[Server, str]
) -> None:
    api, virt, lab = cache.api, cache.virt, cache.lab
    server, sha256 = served
    drop_base(virt, lab, sha256)
    base = f"image-{sha256[:32]}.qcow2"
    name = "gc-guest-" + uuid.uuid4().hex[:6]
    create_image(api, name, f"{server.url}/guest.qcow2", sha256)
    try:
        _machine_on(api, ns, "reuse", name)
        assert base_volumes(virt, lab, sha256) == [base, f"{base}.verified"]

        _delete_machine(api, ns, "reuse")
        _after_a_pass(api, lab, cache.daemon)
        assert base_volumes(virt, lab, sha256) == [base, f"{base}.verified"]
        assert host_entry(api, name).get("phase") == "Ready"

        delete_image(api, name)
        eventually(
            lambda: base_volumes(virt, lab, sha256) == [],
            timeout=GONE_TIMEOUT,
            interval=1,
            what="the unused base and its marker deleted",
        )
    finally:
        delete_image(api, name)


def test_a_base_backing_a_machine_outlives_its_image_until_the_machine_goes(
    cache: Cache, ns: str, served: tuple[Server, str]
) -> None:
    api, virt, lab = cache.api, cache.virt, cache.lab
    server, sha256 = served
    drop_base(virt, lab, sha256)
    base = f"image-{sha256[:32]}.qcow2"
    name = "gc-backing-" + uuid.uuid4().hex[:6]
    create_image(api, name, f"{server.url}/guest.qcow2", sha256)
    try:
        _machine_on(api, ns, "backed", name)

        delete_image(api, name)
        _after_a_pass(api, lab, cache.daemon)
        assert base_volumes(virt, lab, sha256) == [base, f"{base}.verified"]
        # The machine now reports its image missing, but its domain runs on, on that base.
        assert domain_of(api, ns, "backed") in domain_names(virt)

        _delete_machine(api, ns, "backed")
        eventually(
            lambda: base_volumes(virt, lab, sha256) == [],
            timeout=GONE_TIMEOUT,
            interval=1,
            what="the base deleted once no overlay is backed by it",
        )
    finally:
        delete_image(api, name)
