"""cloud-init reaches the guest, and a guest that ignores the power button meets Soft and TrySoft.

The test guest ignores the ACPI power button only when its cloud-init user-data says so, so a Soft
power-off that times out proves both the NoCloud ISO's delivery and Soft's never-force rule; the
switch to TrySoft then proves the forced fallback.
"""

from __future__ import annotations

import base64
from typing import Any

import libvirt
from kubernetes import client

from tests.support.factories import pair
from tests.support.kube import condition, create, domain_of, get, patch_vm, vm_status, wait_ready
from tests.support.lab_access import LabInfo
from tests.support.waiting import eventually

USER_DATA = b"#cloud-config\n# vmapi-marker: hello-from-user-data\n# vmapi-ignore-acpi\n"


def test_soft_never_forces_a_stubborn_guest_and_try_soft_does(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str
) -> None:
    client.CoreV1Api(api_client).create_namespaced_secret(
        ns,
        {
            "metadata": {"name": "stubborn-ci"},
            "data": {"user-data": base64.b64encode(USER_DATA).decode()},
        },
    )
    docs = pair(
        ns,
        "stubborn",
        vm_spec={
            "bootstrap": {"cloudInit": {"userData": {"name": "stubborn-ci", "key": "user-data"}}}
        },
    )
    docs[1]["spec"]["gracefulShutdownTimeoutSeconds"] = 8
    create(api_client, docs)

    def status() -> dict[str, Any]:
        return vm_status(api_client, ns, "stubborn")

    wait_ready(api_client, ns, "stubborn", addresses=True, what="Ready with an address")
    dom = virt.lookupByName(domain_of(api_client, ns, "stubborn"))

    patch_vm(api_client, ns, "stubborn", {"powerState": "PoweredOff", "powerOffMode": "Soft"})
    stuck = eventually(
        lambda: (
            (c := condition(get(api_client, ns, "stubborn", vm=True), "InfrastructureReady"))
            and c.get("reason") == "GuestNotComplying"
            and c
        ),
        timeout=120,
        interval=1,
        what="Soft reporting that the guest does not comply",
    )
    assert "never forces" in stuck["message"]
    assert dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING

    patch_vm(api_client, ns, "stubborn", {"powerOffMode": "TrySoft"})
    eventually(
        lambda: status().get("powerState") == "PoweredOff",
        timeout=120,
        interval=1,
        what="TrySoft forcing the power-off after the timeout",
    )
    assert dom.state()[0] == libvirt.VIR_DOMAIN_SHUTOFF

    # Hard does not ask at all: on again, then off without a single power-button press.
    patch_vm(api_client, ns, "stubborn", {"powerState": "PoweredOn"})
    wait_ready(api_client, ns, "stubborn", addresses=True, what="Ready again")
    presses_before = _presses(api_client, ns)
    patch_vm(api_client, ns, "stubborn", {"powerState": "PoweredOff", "powerOffMode": "Hard"})
    eventually(
        lambda: status().get("powerState") == "PoweredOff",
        timeout=30,
        interval=0.5,
        what="Hard power-off",
    )
    assert _presses(api_client, ns) == presses_before
    events = client.CoreV1Api(api_client).list_namespaced_event(ns).items
    reasons = [e.reason for e in events if e.involved_object.kind == "LibvirtMachine"]
    assert "ShutdownRequested" in reasons
    assert "PoweredOff" in reasons


def _presses(api_client: client.ApiClient, ns: str) -> int:
    events = client.CoreV1Api(api_client).list_namespaced_event(ns).items
    return sum(e.count or 1 for e in events if e.reason == "ShutdownRequested")
