"""Images by URL: one verified download per checksum, shared; a wrong checksum builds nothing.

The test serves the lab's guest image over HTTP on 127.0.0.1 and counts the requests. Each import
is also reported in the LibvirtImage's `status.hosts`, where every host keeps its own entry.
"""

from __future__ import annotations

import hashlib
import subprocess
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import libvirt
import pytest
from kubernetes import client

from libvirt_provider.adapters.kube.adapter import KubeAdapter
from libvirt_provider.images.status import merge_hosts
from tests.support.factories import HOST, pair
from tests.support.images import (
    Server,
    create_image,
    delete_image,
    drop_base,
    host_entry,
    serve_guest,
)
from tests.support.kube import GROUP, V, condition, create, domain_of, get
from tests.support.lab_access import LabInfo
from tests.support.virt import domain_names, machine_volumes
from tests.support.waiting import eventually


@pytest.fixture
def served_guest(lab: LabInfo, tmp_path: Path) -> Iterator[tuple[Server, str]]:
    server, sha256 = serve_guest(lab, tmp_path)
    yield server, sha256
    server.httpd.shutdown()


def test_two_machines_share_one_verified_download(
    api_client: client.ApiClient,
    virt: libvirt.virConnect,
    lab: LabInfo,
    ns: str,
    served_guest: tuple[Server, str],
) -> None:
    server, sha256 = served_guest
    drop_base(virt, lab, sha256)
    name = "url-guest-" + uuid.uuid4().hex[:6]
    create_image(api_client, name, f"{server.url}/guest.qcow2", sha256)
    # Another host's entry, which this host's writes must leave as it is.
    elsewhere = {"host": "elsewhere", "phase": "Failed", "message": "not this host's business"}
    client.CustomObjectsApi(api_client).patch_cluster_custom_object_status(
        GROUP, V, "libvirtimages", name, {"status": {"hosts": [elsewhere]}}
    )
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
            domain = domain_of(api_client, ns, vm)
            assert machine_volumes(virt, lab, f"{domain}--") == [f"{domain}--boot.qcow2"]
        entry = eventually(
            lambda: (e := host_entry(api_client, name)).get("phase") == "Ready" and e,
            timeout=60,
            what="the image Ready on this host in its status",
        )
        assert entry == {
            "host": HOST,
            "phase": "Ready",
            "pool": lab.pool,
            "volume": f"image-{sha256[:32]}.qcow2",
        }
        assert host_entry(api_client, name, "elsewhere") == elsewhere
    finally:
        delete_image(api_client, name)


def test_a_wrong_checksum_is_reported_and_leaves_nothing(
    api_client: client.ApiClient,
    virt: libvirt.virConnect,
    lab: LabInfo,
    ns: str,
    served_guest: tuple[Server, str],
) -> None:
    server, _ = served_guest
    wrong = "0" * 64
    name = "bad-guest-" + uuid.uuid4().hex[:6]
    create_image(api_client, name, f"{server.url}/guest.qcow2", wrong)
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
        domain = domain_of(api_client, ns, "tampered")
        assert domain not in domain_names(virt)
        assert machine_volumes(virt, lab, f"{domain}--") == []
        entry = eventually(
            lambda: (e := host_entry(api_client, name)).get("phase") == "Failed" and e,
            timeout=60,
            what="the failed import in the image's status",
        )
        assert "does not match" in entry["message"]
        assert (entry["pool"], entry["volume"]) == (lab.pool, f"image-{wrong[:32]}.qcow2")
    finally:
        delete_image(api_client, name)


def test_hosts_writing_at_once_never_lose_each_others_entries(
    api_client: client.ApiClient, daemon: str
) -> None:
    """Many daemons update one image's status.hosts together; every entry survives."""
    name = "shared-status-" + uuid.uuid4().hex[:6]
    create_image(api_client, name, "http://127.0.0.1:1/none.qcow2", "1" * 64)
    hosts = [f"host-{i}" for i in range(6)]
    rounds = 5

    def write(host: str) -> None:
        adapter = KubeAdapter(api_client, host=host)
        for done in range(1, rounds + 1):
            entry = {"host": host, "phase": "Importing", "bytesDone": done, "bytesTotal": rounds}

            def change(obj: Any, entry: dict[str, Any] = entry, host: str = host) -> Any:
                current = (obj.get("status") or {}).get("hosts") or []
                return merge_hosts(current, host, entry)

            adapter.update_image_hosts(name, change)

    try:
        with ThreadPoolExecutor(len(hosts)) as pool:
            list(pool.map(write, hosts))
        for host in hosts:
            assert host_entry(api_client, name, host)["bytesDone"] == rounds
    finally:
        delete_image(api_client, name)


MIB = 1024 * 1024


class TrickleServer:
    """Serves one file: 4 MiB at once, then 1 MiB a second until `release` is set, then the rest.

    A slow network on demand: the import stays in progress long enough for its progress to be
    written, and ends as soon as the test has seen it."""

    def __init__(self, path: Path) -> None:
        self.release = threading.Event()
        data = path.read_bytes()
        release = self.release

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                sent = 4 * MIB
                self.wfile.write(data[:sent])
                while sent < len(data) and not release.wait(1.0):
                    self.wfile.write(data[sent : sent + MIB])
                    sent += MIB
                self.wfile.write(data[sent:])

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/image"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def test_import_progress_shows_on_the_image_and_the_waiting_machine(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str, tmp_path: Path
) -> None:
    source = lab.dir / "pool" / lab.guest_volume
    sha256 = hashlib.sha256(source.read_bytes()).hexdigest()
    total = source.stat().st_size
    drop_base(virt, lab, sha256)
    server = TrickleServer(source)
    name = "slow-guest-" + uuid.uuid4().hex[:6]
    create_image(api_client, name, server.url, sha256)
    try:
        docs = pair(ns, "patient")
        docs[0]["spec"]["bootDisk"]["source"]["image"]["name"] = name
        create(api_client, docs)
        entry = eventually(
            lambda: (
                (e := host_entry(api_client, name)).get("phase") == "Importing"
                and 0 < (e.get("bytesDone") or 0) < total
                and e
            ),
            timeout=60,
            interval=0.5,
            what="the image's status showing the import part-way",
        )
        assert entry["bytesTotal"] == total
        waiting = eventually(
            lambda: (
                (c := condition(get(api_client, ns, "patient", vm=True), "InfrastructureReady"))
                and c.get("reason") == "ImportingImage"
                and f"of {total} bytes" in c.get("message", "")
                and c
            ),
            timeout=30,
            interval=0.5,
            what="the waiting VM saying how far the import is",
        )
        assert name in waiting["message"]
        server.release.set()
        eventually(
            lambda: host_entry(api_client, name).get("phase") == "Ready",
            timeout=60,
            interval=0.5,
            what="the image Ready once the rest arrived",
        )
        eventually(
            lambda: ((get(api_client, ns, "patient", vm=True) or {}).get("status") or {}).get(
                "ready"
            ),
            timeout=240,
            interval=1,
            what="the VM Ready on the imported image",
        )
    finally:
        server.release.set()
        server.httpd.shutdown()
        delete_image(api_client, name)


def test_an_image_whose_virtual_size_exceeds_its_disk_builds_nothing(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str, tmp_path: Path
) -> None:
    # A qcow2 of a few hundred KiB announcing an 8 GiB disk, for a 1 GiB boot disk: the overlay
    # used to be grown to 8 GiB, beyond what allocation and the pool's free space counted.
    image = tmp_path / "huge.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(image), "8G"], check=True)
    sha256 = hashlib.sha256(image.read_bytes()).hexdigest()
    server = Server(tmp_path)
    name = "huge-" + uuid.uuid4().hex[:6]
    create_image(api_client, name, f"{server.url}/huge.qcow2", sha256)
    try:
        docs = pair(ns, "swollen")
        docs[0]["spec"]["bootDisk"]["source"]["image"]["name"] = name
        docs[0]["spec"]["bootDisk"]["sizeGiB"] = 1
        create(api_client, docs)
        cond = eventually(
            lambda: (
                (c := condition(get(api_client, ns, "swollen", vm=False), "InfrastructureReady"))
                and "virtual size" in c.get("message", "")
                and c
            ),
            timeout=120,
            interval=1,
            what="the oversized image reported on the machine",
        )
        assert cond["status"] == "False"
        assert "virtual size of 8 GiB, more than disk 'boot' asks (1 GiB)" in cond["message"]
        assert "sizeGiB to at least 8" in cond["message"]
        domain = domain_of(api_client, ns, "swollen")
        assert domain not in domain_names(virt)
        assert machine_volumes(virt, lab, f"{domain}--") == []
    finally:
        server.httpd.shutdown()
        delete_image(api_client, name)
        drop_base(virt, lab, sha256)
