"""VNC through Kubernetes, as a user reaches it: `kubectl vm screenshot` and `kubectl vm vnc`
with a ServiceAccount's token, through the lab's API server and its aggregation layer, to the
daemon, which opens the busybox guest's display through libvirt (docs/console.md, "VNC and
screenshots").

One daemon (conftest.py's) and one booted busybox guest with `spec.console.graphics: VNC` serve
the whole module.
"""

from __future__ import annotations

from pathlib import Path

import libvirt
from kubernetes import client
from lxml import etree

from libvirt_provider.console.vnc import png_size
from tests.support.console import bind_console, user_kubeconfig
from tests.support.kube import get
from tests.support.lab_access import LabInfo
from tests.support.vnc import (
    VncForward,
    bind_vnc,
    libvirt_screen_size,
    rfb_server_init,
    run_screenshot,
    vnc_refused,
)
from tests.support.waiting import eventually

MACHINE = "desktop"


def _domain_uuid(api_client: client.ApiClient, ns: str) -> str:
    machine = get(api_client, ns, MACHINE, vm=False)
    assert machine is not None
    return str(machine["metadata"]["uid"])


def test_a_screenshot_is_a_png_of_the_guests_screen(
    lab: LabInfo,
    api_client: client.ApiClient,
    virt: libvirt.virConnect,
    vnc_guest_ns: str,
    tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "viewer.kubeconfig"
    user = user_kubeconfig(lab, api_client, kubeconfig, namespace=vnc_guest_ns, name="viewer")
    bind_vnc(api_client, vnc_guest_ns, user)
    shot = tmp_path / "screen.png"
    code, errors = run_screenshot(kubeconfig, vnc_guest_ns, MACHINE, shot)
    assert code == 0, errors
    size = png_size(shot.read_bytes())  # the signature, and the IHDR's CRC
    expected = libvirt_screen_size(virt, _domain_uuid(api_client, vnc_guest_ns))
    assert size == expected
    assert size[0] >= 320, size
    assert size[1] >= 200, size


def test_the_display_has_no_port_on_the_host(
    api_client: client.ApiClient, virt: libvirt.virConnect, vnc_guest_ns: str
) -> None:
    """The running domain's VNC server listens nowhere: only libvirt hands it clients."""
    live = etree.fromstring(
        virt.lookupByUUIDString(_domain_uuid(api_client, vnc_guest_ns)).XMLDesc(0)
    )
    graphics = live.findall("devices/graphics")
    assert [g.get("type") for g in graphics] == ["vnc"]
    assert [x.get("type") for x in graphics[0].findall("listen")] == ["none"]
    assert int(graphics[0].get("port") or "-1") <= 0, etree.tostring(graphics[0])


def test_the_local_vnc_port_speaks_rfb_with_the_guests_framebuffer(
    lab: LabInfo,
    api_client: client.ApiClient,
    virt: libvirt.virConnect,
    vnc_guest_ns: str,
    tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "watcher.kubeconfig"
    user = user_kubeconfig(lab, api_client, kubeconfig, namespace=vnc_guest_ns, name="watcher")
    bind_vnc(api_client, vnc_guest_ns, user)
    forward = VncForward(kubeconfig, vnc_guest_ns, MACHINE)
    try:
        version, init = rfb_server_init(forward.port)
        # Twice: every viewer connection gets a WebSocket of its own.
        again, second = rfb_server_init(forward.port)
    finally:
        forward.stop()
    assert version == again == (3, 8), forward.errors
    expected = libvirt_screen_size(virt, _domain_uuid(api_client, vnc_guest_ns))
    assert (init.width, init.height) == (second.width, second.height) == expected
    # The audit trail names the user who opened the display, and how the session ended.
    core = client.CoreV1Api(api_client)

    def audited() -> bool:
        events = core.list_namespaced_event(
            vnc_guest_ns, field_selector=f"involvedObject.name={MACHINE}"
        ).items
        reasons = [(e.reason, e.message or "") for e in events]
        opened = [m for r, m in reasons if r == "VncAttached" and user in m]
        left = [m for r, m in reasons if r == "VncDetached" and user in m]
        # Identical Events (the same user, twice) may be folded into one with a count.
        return bool(opened) and bool(left)

    eventually(audited, timeout=30, what="VncAttached and VncDetached Events naming the user")


def test_a_user_without_the_vnc_binding_is_forbidden(
    lab: LabInfo, api_client: client.ApiClient, vnc_guest_ns: str, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "typist.kubeconfig"
    user = user_kubeconfig(lab, api_client, kubeconfig, namespace=vnc_guest_ns, name="typist")
    bind_console(api_client, vnc_guest_ns, user)  # the serial console is not the display
    shot = tmp_path / "screen.png"
    code, errors = run_screenshot(kubeconfig, vnc_guest_ns, MACHINE, shot)
    assert code == 1
    assert "Forbidden" in errors, errors
    assert "libvirtmachines/vnc" in errors, errors
    assert not shot.exists()
    vnc_refused(kubeconfig, vnc_guest_ns, MACHINE, "Forbidden")


def test_the_api_server_publishes_the_vnc_subresource(
    api_client: client.ApiClient, console_port: int
) -> None:
    """What `kubectl api-resources` shows, read through the aggregator's discovery."""
    resources = client.CustomObjectsApi(api_client).get_api_resources(
        "subresources.infrastructure.vm-api.io", "v1alpha1"
    )
    names = {r.name: r.verbs for r in resources.resources}
    assert names.get("libvirtmachines/vnc") == ["get"], names
