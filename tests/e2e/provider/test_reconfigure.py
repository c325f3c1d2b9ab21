"""Changing a machine after it runs: sizes and NICs live, the rest and cloud-init at a power cycle.

The guest's serial console is logged to a file (the daemon's --console-log-dir), so the test reads
what the guest itself printed: which user-data it found on its cloud-init ISO, on each boot.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import libvirt
from kubernetes import client
from lxml import etree

from tests.support.daemons import console_log_dir
from tests.support.factories import pair
from tests.support.kube import (
    GROUP,
    VM_GROUP,
    V,
    condition,
    create,
    domain_of,
    get,
    patch_vm,
    vm_status,
    wait_ready,
)
from tests.support.lab_access import LabInfo
from tests.support.virt import machine_volumes
from tests.support.waiting import eventually


def _up_to_date(api_client: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    return condition(get(api_client, ns, name, vm=True), "UpToDate")


def _pending(api_client: client.ApiClient, ns: str, name: str, what: str) -> dict[str, Any]:
    """The UpToDate condition once it says RequiresPowerOff."""
    found: dict[str, Any] = eventually(
        lambda: (c := _up_to_date(api_client, ns, name)).get("reason") == "RequiresPowerOff" and c,
        timeout=60,
        interval=0.5,
        what=what,
    )
    return found


def _patch_machine(api_client: client.ApiClient, ns: str, name: str, body: dict[str, Any]) -> None:
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        GROUP, V, ns, "libvirtmachines", name, body
    )


def _user_data(marker: str) -> dict[str, str]:
    text = f"#cloud-config\n# vmapi-marker: {marker}\n".encode()
    return {"user-data": base64.b64encode(text).decode()}


def test_the_guest_reads_its_cloud_init_and_a_changed_secret_waits_for_a_power_cycle(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str
) -> None:
    core = client.CoreV1Api(api_client)
    first, second = f"first-{uuid.uuid4().hex[:8]}", f"second-{uuid.uuid4().hex[:8]}"
    core.create_namespaced_secret(ns, {"metadata": {"name": "ci"}, "data": _user_data(first)})
    create(
        api_client,
        pair(
            ns,
            "told",
            vm_spec={
                "bootstrap": {"cloudInit": {"userData": {"name": "ci", "key": "user-data"}}},
                "network": {"hostName": "told-guest"},
            },
        ),
    )
    wait_ready(api_client, ns, "told", addresses=True, what="Ready with an address")
    domain = domain_of(api_client, ns, "told")
    log = Path(console_log_dir(lab)) / f"{domain}.serial.log"
    eventually(
        lambda: log.exists() and f"VMAPI-GUEST-USERDATA {first}" in log.read_text(errors="replace"),
        timeout=60,
        interval=0.5,
        what=f"the guest printing the user-data marker on its console ({log})",
    )
    assert "VMAPI-GUEST-HOSTNAME told-guest" in log.read_text(errors="replace")

    core.patch_namespaced_secret("ci", ns, {"data": _user_data(second)})
    # Secrets are not watched (see docs/operations.md): touching the machine makes the daemon
    # look now rather than at its next resync.
    _patch_machine(api_client, ns, "told", {"metadata": {"labels": {"touched": "1"}}})
    pending = _pending(api_client, ns, "told", "RequiresPowerOff after the Secret changed")
    assert "cloud-init data changed" in pending["message"]
    assert second not in pending["message"]
    assert virt.lookupByName(domain).isActive()

    patch_vm(api_client, ns, "told", {"powerState": "PoweredOff", "powerOffMode": "Hard"})
    eventually(
        lambda: (
            vm_status(api_client, ns, "told").get("powerState") == "PoweredOff"
            and _up_to_date(api_client, ns, "told").get("status") == "True"
        ),
        timeout=60,
        interval=0.5,
        what="powered off with the new cloud-init data applied",
    )
    patch_vm(api_client, ns, "told", {"powerState": "PoweredOn"})
    eventually(
        lambda: f"VMAPI-GUEST-USERDATA {second}" in log.read_text(errors="replace"),
        timeout=120,
        interval=0.5,
        what="the guest reading the changed user-data on its next boot",
    )
    events = core.list_namespaced_event(ns).items
    assert not any(second in (e.message or "") for e in events)

    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        VM_GROUP, V, ns, "virtualmachines", "told"
    )
    eventually(lambda: not log.exists(), timeout=120, what="the console log removed with it")
    eventually(
        lambda: get(api_client, ns, "told", vm=False) is None,
        timeout=120,
        what="the LibvirtMachine gone",
    )
    assert machine_volumes(virt, lab, f"{domain}--") == []  # boot overlay and cloud-init ISO


def test_sizes_and_nics_change_live_and_more_slots_wait_for_a_power_cycle(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str
) -> None:
    docs = pair(
        ns,
        "grow",
        vm_spec={
            "instanceType": {"resources": {"cpus": 1, "memory": "256Mi"}},
            "network": {"interfaces": [{"name": "eth0"}]},
        },
    )
    docs[1]["spec"]["hotplug"] = {"maxCPUs": 2, "maxMemory": "512Mi"}
    create(api_client, docs)
    wait_ready(api_client, ns, "grow", addresses=True, what="Ready with an address")
    dom = virt.lookupByName(domain_of(api_client, ns, "grow"))
    run_id = dom.ID()

    def live_vcpus() -> int:
        return int(dom.vcpusFlags(libvirt.VIR_DOMAIN_AFFECT_LIVE))

    def xml(flags: int = 0) -> etree._Element:
        return etree.fromstring(dom.XMLDesc(flags).encode())

    patch_vm(
        api_client,
        ns,
        "grow",
        {
            "instanceType": {"resources": {"cpus": 2, "memory": "384Mi"}},
            "network": {"interfaces": [{"name": "eth0"}, {"name": "eth1"}]},
        },
    )
    eventually(
        lambda: live_vcpus() == 2 and len(xml().findall("devices/interface")) == 2,
        timeout=60,
        interval=0.5,
        what="the second vCPU and NIC hot-plugged",
    )
    inactive = xml(libvirt.VIR_DOMAIN_XML_INACTIVE)
    assert int(inactive.findtext("currentMemory") or 0) == 384 * 1024
    assert len(inactive.findall("devices/interface")) == 2
    assert dom.ID() == run_id, "the domain was restarted instead of changed live"
    eventually(
        lambda: _up_to_date(api_client, ns, "grow").get("status") == "True",
        timeout=30,
        interval=0.5,
        what="UpToDate after the live changes",
    )
    events = client.CoreV1Api(api_client).list_namespaced_event(ns).items
    assert any(e.reason == "UpdatedLive" for e in events)

    # More slots than the domain booted with: only a power cycle gives them.
    _patch_machine(api_client, ns, "grow", {"spec": {"hotplug": {"maxCPUs": 4}}})
    patch_vm(api_client, ns, "grow", {"instanceType": {"resources": {"cpus": 3}}})
    pending = _pending(api_client, ns, "grow", "the slot change reported as pending")
    assert "vCPU slots" in pending["message"]
    assert dom.ID() == run_id
    assert live_vcpus() == 2

    patch_vm(api_client, ns, "grow", {"powerState": "PoweredOff", "powerOffMode": "Hard"})
    eventually(
        lambda: (
            vm_status(api_client, ns, "grow").get("powerState") == "PoweredOff"
            and _up_to_date(api_client, ns, "grow").get("status") == "True"
        ),
        timeout=60,
        interval=0.5,
        what="the change applied while off",
    )
    vcpu = xml(libvirt.VIR_DOMAIN_XML_INACTIVE).find("vcpu")
    assert vcpu is not None
    assert (vcpu.text, vcpu.get("current")) == ("4", "3")
    patch_vm(api_client, ns, "grow", {"powerState": "PoweredOn"})
    wait_ready(api_client, ns, "grow", addresses=True, what="Ready again with three vCPUs")
    assert live_vcpus() == 3
