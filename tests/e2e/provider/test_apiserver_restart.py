"""The kube-apiserver restarts under a running daemon; changes made around the outage are acted on.

Why: every watch the daemon holds (kopf's on machines and VMs, the catalog informers, the generic
controller's provider watches, the Lease) ends with a connection error when the API server goes,
and resuming from a resourceVersion the restarted server's watch cache no longer has answers 410
Gone. A watch that never resumes, or resumes past an event, leaves a change unacted on until the
5-minute resync or for good; the daemon must get there by itself, without being restarted.

The daemon runs on libvirt's test driver inside the lab's libvirtd (`test+unix:///default`), so
domains start at once and this test sees them through its own connection. Restarting the API
server disturbs every client of the lab, so the test carries the `apiserver_restart` marker, which
`make e2e` runs in the second session (no other test's daemon is running then), and it leaves the
API server ready.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import Any

import libvirt
import pytest
from kubernetes import client

from libvirt_provider.constants import HOST_LABEL
from tests.support.factories import pair
from tests.support.kube import (
    GROUP,
    V,
    create,
    domain_of,
    get,
    install_api,
    namespace,
    patch_vm,
    vm_status,
)
from tests.support.lab_access import LAB_SCRIPT, LabInfo
from tests.support.testdriver import Daemons, SharedTestDriver, forget_hosts
from tests.support.waiting import eventually

pytestmark = pytest.mark.apiserver_restart

HOST_PREFIX = "restart-host-"
# After the API server answers again: time for every watch to resume and each change to be acted
# on (the daemon backs off while the server is away, a few seconds at most for an outage this
# short).
AFTER_RESTART = 45.0


def _pair(ns: str, name: str, *, image: str | None = None) -> list[dict[str, Any]]:
    docs = pair(ns, name)
    docs[1]["metadata"]["labels"][HOST_LABEL] = f"{HOST_PREFIX}0"
    docs[1]["spec"]["host"] = f"{HOST_PREFIX}0"
    if image is not None:
        docs[0]["spec"]["bootDisk"]["source"]["image"]["name"] = image
    return docs


def _image(lab: LabInfo, name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{V}",
        "kind": "LibvirtImage",
        "metadata": {"name": name},
        "spec": {"source": {"volume": {"pool": lab.pool, "volume": lab.guest_volume}}},
    }


def _state(driver: SharedTestDriver, domain: str) -> int | None:
    try:
        return int(driver.conn.lookupByName(domain).state()[0])
    except libvirt.libvirtError:
        return None


def _running_and_ready(
    api_client: client.ApiClient, driver: SharedTestDriver, ns: str, name: str
) -> bool:
    if get(api_client, ns, name, vm=False) is None:
        return False
    return _state(driver, domain_of(api_client, ns, name)) == libvirt.VIR_DOMAIN_RUNNING and bool(
        vm_status(api_client, ns, name).get("ready")
    )


@pytest.mark.parametrize("down_seconds", [0.0, 65.0], ids=["short", "longer-than-retries"])
def test_changes_around_an_api_server_restart_are_acted_on(
    lab: LabInfo, api_client: client.ApiClient, down_seconds: float
) -> None:
    install_api(lab, api_client)
    custom = client.CustomObjectsApi(api_client)
    driver = SharedTestDriver(lab, pools=0)
    daemons = Daemons(
        lab, driver.uri, 1, host_prefix=HOST_PREFIX, log_prefix="e2e-apiserver-restart-"
    )
    late_image = "late-" + uuid.uuid4().hex[:6]
    try:
        daemons.wait_started()
        pid = daemons.items[0].proc.pid
        with namespace(api_client) as ns:
            # Before: `off` and `bounced` run; `waiting` waits for an image nobody made yet.
            for docs in (_pair(ns, "off"), _pair(ns, "bounced")):
                create(api_client, docs)
            create(api_client, _pair(ns, "waiting", image=late_image))
            for name in ("off", "bounced"):
                eventually(
                    lambda name=name: _running_and_ready(api_client, driver, ns, name),
                    timeout=60,
                    what=f"{name} running and Ready before the restart",
                )
            eventually(
                lambda: (
                    vm_status(api_client, ns, "waiting").get("failureReason") is not None
                    or any(
                        c.get("reason") == "ReferenceNotFound"
                        for c in vm_status(api_client, ns, "waiting").get("conditions") or []
                    )
                ),
                timeout=30,
                what="waiting reporting its missing image",
            )
            bounced = domain_of(api_client, ns, "bounced")

            # During: the API server goes; libvirt changes under the daemon meanwhile.
            stop = subprocess.Popen(
                [
                    sys.executable,
                    str(LAB_SCRIPT),
                    "restart-apiserver",
                    f"--down-seconds={down_seconds}",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            eventually(
                lambda: not _api_answers(api_client),
                timeout=30,
                what="the API server going away",
            )
            driver.conn.lookupByName(bounced).destroy()
            out, _ = stop.communicate(timeout=down_seconds + 120)
            assert stop.returncode == 0, out

            # After: changes made as soon as it answers again.
            create(api_client, _pair(ns, "after"))
            patch_vm(api_client, ns, "off", {"powerState": "PoweredOff", "powerOffMode": "Hard"})
            custom.create_cluster_custom_object(GROUP, V, "libvirtimages", _image(lab, late_image))

            off = domain_of(api_client, ns, "off")
            eventually(
                lambda: (
                    _state(driver, off) == libvirt.VIR_DOMAIN_SHUTOFF
                    and vm_status(api_client, ns, "off").get("powerState") == "PoweredOff"
                ),
                timeout=AFTER_RESTART,
                what="off powered off after the restart",
            )
            for name in ("after", "waiting", "bounced"):
                eventually(
                    lambda name=name: _running_and_ready(api_client, driver, ns, name),
                    timeout=AFTER_RESTART,
                    what=f"{name} running and Ready after the restart",
                )
            assert daemons.alive(), "the daemon exited"
            assert daemons.items[0].proc.pid == pid, "the daemon restarted"
    finally:
        statuses = daemons.stop()
        driver.close()
        forget_hosts(custom, HOST_PREFIX)
        _delete_image(custom, late_image)
    assert statuses == [0], f"the daemon did not stop cleanly; see {daemons.items[0].log}"


def _api_answers(api_client: client.ApiClient) -> bool:
    try:
        client.VersionApi(api_client).get_code(_request_timeout=2)
    except Exception:  # any failure to answer is what is waited for
        return False
    return True


def _delete_image(custom: client.CustomObjectsApi, name: str) -> None:
    try:
        custom.delete_cluster_custom_object(GROUP, V, "libvirtimages", name)
    except client.exceptions.ApiException as err:
        if err.status != 404:
            raise
