"""Images by URL in the lab: the lab's guest image served over HTTP (requests counted), the
LibvirtImage naming it, this host's entry in its status, and the cached bases in the pool.

Why a module of its own: the import tests and the image-cache tests both serve the guest image
and look at the bases it leaves; one copy keeps them checking the same volumes.
"""

from __future__ import annotations

import hashlib
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import libvirt
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support.factories import HOST
from tests.support.kube import GROUP, V
from tests.support.lab_access import LabInfo
from tests.support.virt import machine_volumes


class Server:
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


def serve_guest(lab: LabInfo, root: Path, *, volume: str | None = None) -> tuple[Server, str]:
    """The lab's busybox guest image (or another volume of the main pool, e.g. the Debian one) over
    HTTP as `/guest.qcow2`, and its sha256."""
    image = root / "guest.qcow2"
    image.write_bytes((lab.dir / "pool" / (volume or lab.guest_volume)).read_bytes())
    with image.open("rb") as served:
        sha256 = hashlib.file_digest(served, "sha256").hexdigest()
    return Server(root), sha256


def create_image(api_client: client.ApiClient, name: str, url: str, sha256: str) -> None:
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


def delete_image(api_client: client.ApiClient, name: str) -> None:
    try:
        client.CustomObjectsApi(api_client).delete_cluster_custom_object(
            GROUP, V, "libvirtimages", name
        )
    except ApiException as err:
        if err.status != 404:
            raise


def drop_base(virt: libvirt.virConnect, lab: LabInfo, sha256: str) -> None:
    pool = virt.storagePoolLookupByName(lab.pool)
    for vol in pool.listAllVolumes(0):
        if vol.name().startswith(f"image-{sha256[:32]}"):
            vol.delete(0)


def base_volumes(virt: libvirt.virConnect, lab: LabInfo, sha256: str) -> list[str]:
    return sorted(machine_volumes(virt, lab, f"image-{sha256[:32]}"))


def host_entry(api_client: client.ApiClient, image: str, host: str = HOST) -> dict[str, Any]:
    """This host's entry in the image's status.hosts ({} while there is none)."""
    obj = client.CustomObjectsApi(api_client).get_cluster_custom_object(
        GROUP, V, "libvirtimages", image
    )
    for entry in (obj.get("status") or {}).get("hosts") or []:
        if entry.get("host") == host:
            return dict(entry)
    return {}
