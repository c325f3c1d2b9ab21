"""Images by URL: one verified download per checksum, shared; a wrong checksum builds nothing.

The test serves the lab's guest image over HTTP on 127.0.0.1 and counts the requests.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import libvirt
import pytest
from kubernetes import client

from libvirt_provider import naming
from tests.e2e.conftest import LabInfo
from tests.e2e.provider.conftest import (
    GROUP,
    condition,
    create,
    domain_names,
    get,
    machine_volumes,
    pair,
)
from tests.eventually import eventually


class _Server:
    def __init__(self, root: Path) -> None:
        self.requests: list[str] = []
        server = self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(root), **kwargs)

            def do_GET(self) -> None:
                server.requests.append(self.path)
                super().do_GET()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def served_guest(lab: LabInfo, tmp_path: Path) -> Iterator[tuple[_Server, str]]:
    image = tmp_path / "guest.qcow2"
    image.write_bytes((lab.dir / "pool" / lab.guest_volume).read_bytes())
    server = _Server(tmp_path)
    yield server, hashlib.sha256(image.read_bytes()).hexdigest()
    server.httpd.shutdown()


def _image(api_client: client.ApiClient, name: str, url: str, sha256: str) -> None:
    client.CustomObjectsApi(api_client).create_cluster_custom_object(
        GROUP,
        "v1alpha1",
        "libvirtimages",
        {
            "apiVersion": f"{GROUP}/v1alpha1",
            "kind": "LibvirtImage",
            "metadata": {"name": name},
            "spec": {"source": {"http": {"url": url, "sha256": sha256}}, "format": "qcow2"},
        },
    )


def _drop_base(virt: libvirt.virConnect, lab: LabInfo, sha256: str) -> None:
    pool = virt.storagePoolLookupByName(lab.pool)
    for vol in pool.listAllVolumes(0):
        if vol.name().startswith(f"image-{sha256[:32]}"):
            vol.delete(0)


def test_two_machines_share_one_verified_download(
    api_client: client.ApiClient,
    virt: libvirt.virConnect,
    lab: LabInfo,
    ns: str,
    served_guest: tuple[_Server, str],
) -> None:
    server, sha256 = served_guest
    _drop_base(virt, lab, sha256)
    name = "url-guest-" + uuid.uuid4().hex[:6]
    _image(api_client, name, f"{server.url}/guest.qcow2", sha256)
    try:
        for vm in ("one", "two"):
            docs = pair(ns, vm)
            docs[0]["spec"]["bootDisk"]["source"]["image"]["name"] = name
            create(api_client, docs)
        for vm in ("one", "two"):
            eventually(
                lambda vm=vm: ((get(api_client, ns, vm, vm=True) or {}).get("status") or {}).get(
                    "ready"
                ),
                timeout=300,
                interval=1,
                what=f"VM {vm} Ready on the imported image",
            )
        assert server.requests == ["/guest.qcow2"]
        bases = machine_volumes(virt, lab, f"image-{sha256[:32]}")
        assert sorted(bases) == [
            f"image-{sha256[:32]}.qcow2",
            f"image-{sha256[:32]}.qcow2.verified",
        ]
        for vm in ("one", "two"):
            domain = naming.domain_name(ns, vm)
            assert machine_volumes(virt, lab, f"{domain}--") == [f"{domain}--boot.qcow2"]
    finally:
        client.CustomObjectsApi(api_client).delete_cluster_custom_object(
            GROUP, "v1alpha1", "libvirtimages", name
        )


def test_a_wrong_checksum_is_reported_and_leaves_nothing(
    api_client: client.ApiClient,
    virt: libvirt.virConnect,
    lab: LabInfo,
    ns: str,
    served_guest: tuple[_Server, str],
) -> None:
    server, _ = served_guest
    wrong = "0" * 64
    name = "bad-guest-" + uuid.uuid4().hex[:6]
    _image(api_client, name, f"{server.url}/guest.qcow2", wrong)
    try:
        docs = pair(ns, "tampered")
        docs[0]["spec"]["bootDisk"]["source"]["image"]["name"] = name
        create(api_client, docs)
        cond = eventually(
            lambda: (
                (c := condition(get(api_client, ns, "tampered", vm=False), "InfrastructureReady"))
                and c.get("reason") == "ImageImportFailed"
                and c
            ),
            timeout=120,
            interval=1,
            what="the failed import reported on the machine",
        )
        assert "does not match" in cond["message"]
        assert machine_volumes(virt, lab, f"image-{wrong[:32]}") == []
        domain = naming.domain_name(ns, "tampered")
        assert domain not in domain_names(virt)
        assert machine_volumes(virt, lab, f"{domain}--") == []
    finally:
        client.CustomObjectsApi(api_client).delete_cluster_custom_object(
            GROUP, "v1alpha1", "libvirtimages", name
        )
