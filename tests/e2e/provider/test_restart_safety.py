"""Crashes and restarts: kill -9 the daemon at each step of create, restart libvirtd, delete early.

These tests run the LibvirtMachine controller alone (`--no-generic`) on a host name of their own,
and read the outcome from the LibvirtMachine's status and from libvirt itself.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import libvirt
import pytest
from kubernetes import client

from tests.support.daemons import start_daemon
from tests.support.factories import pair
from tests.support.kube import GROUP, V, apply, condition, create, domain_of, get, patch_vm
from tests.support.lab_access import LAB_SCRIPT, REPO, LabInfo
from tests.support.virt import domain_names, machine_volumes
from tests.support.waiting import eventually

HOST = "restart-host"


@contextmanager
def running_daemon(
    lab: LabInfo, *, crash_point: str | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    proc, _ = start_daemon(
        lab, host=HOST, log_name="e2e-restart-daemon.log", crash_point=crash_point, generic=False
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def ns(lab: LabInfo, api_client: client.ApiClient) -> Iterator[str]:
    apply(lab, REPO / "crds")
    apply(lab, REPO / "deploy" / "samples" / "catalog.yaml")
    name = "rs-" + uuid.uuid4().hex[:8]
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    custom = client.CustomObjectsApi(api_client)
    leftovers = custom.list_namespaced_custom_object(GROUP, V, name, "libvirtmachines")["items"]
    if leftovers:
        with running_daemon(lab):
            for lm in leftovers:
                custom.delete_namespaced_custom_object(
                    GROUP, V, name, "libvirtmachines", lm["metadata"]["name"]
                )
            eventually(
                lambda: (
                    not custom.list_namespaced_custom_object(GROUP, V, name, "libvirtmachines")[
                        "items"
                    ]
                ),
                timeout=120,
                what="leftover machines cleaned up",
            )
    core.delete_namespace(name)


def _pair_on_host(ns: str, name: str) -> list[dict[str, Any]]:
    docs = pair(ns, name)
    docs[1]["metadata"].setdefault("labels", {})["infrastructure.vm-api.io/host"] = HOST
    docs[1]["spec"]["host"] = HOST
    return docs


def _machine_ready(api_client: client.ApiClient, ns: str, name: str) -> bool:
    lm = get(api_client, ns, name, vm=False)
    cond = condition(lm, "InfrastructureReady")
    return cond.get("status") == "True" and cond.get("reason") == "Running"


def _domains_of(virt: libvirt.virConnect, uid: str, name: str) -> list[libvirt.virDomain]:
    return [d for d in virt.listAllDomains(0) if d.UUIDString() == uid or d.name() == name]


@pytest.mark.parametrize(
    "point", ["create:after-volumes", "create:after-define", "create:after-start"]
)
def test_a_crash_at_each_step_of_create_converges_to_one_domain_and_no_leak(
    lab: LabInfo, api_client: client.ApiClient, virt: libvirt.virConnect, ns: str, point: str
) -> None:
    create(api_client, _pair_on_host(ns, "crashy"))
    with running_daemon(lab, crash_point=point) as crashing:
        assert crashing.wait(timeout=120) == -signal.SIGKILL, "the crash point was not reached"
    lm = get(api_client, ns, "crashy", vm=False)
    assert lm is not None
    uid = lm["metadata"]["uid"]
    domain = domain_of(api_client, ns, "crashy")

    with running_daemon(lab):
        eventually(
            lambda: _machine_ready(api_client, ns, "crashy"),
            timeout=240,
            interval=1,
            what="Ready after the restart",
        )
        domains = _domains_of(virt, uid, domain)
        assert [d.UUIDString() for d in domains] == [uid]
        assert domains[0].isActive()
        assert machine_volumes(virt, lab, f"{domain}--") == [f"{domain}--boot.qcow2"]

        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            GROUP, V, ns, "libvirtmachines", "crashy"
        )
        eventually(
            lambda: get(api_client, ns, "crashy", vm=False) is None,
            timeout=120,
            what="the machine deleted",
        )
    assert _domains_of(virt, uid, domain) == []
    assert machine_volumes(virt, lab, f"{domain}--") == []


def test_a_machine_deleted_while_it_is_being_created_leaks_nothing(
    lab: LabInfo, api_client: client.ApiClient, virt: libvirt.virConnect, ns: str
) -> None:
    with running_daemon(lab):
        create(api_client, _pair_on_host(ns, "hasty"))
        domain = domain_of(api_client, ns, "hasty")
        eventually(
            lambda: bool(machine_volumes(virt, lab, f"{domain}--")),
            timeout=60,
            interval=0.1,
            what="creation under way",
        )
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            GROUP, V, ns, "libvirtmachines", "hasty"
        )
        eventually(
            lambda: get(api_client, ns, "hasty", vm=False) is None,
            timeout=120,
            what="the machine deleted",
        )
    assert domain not in domain_names(virt)
    assert machine_volumes(virt, lab, f"{domain}--") == []


def test_the_daemon_recovers_when_libvirtd_restarts(
    lab: LabInfo, api_client: client.ApiClient, virt: libvirt.virConnect, ns: str
) -> None:
    with running_daemon(lab) as daemon:
        create(api_client, _pair_on_host(ns, "steady"))
        eventually(
            lambda: _machine_ready(api_client, ns, "steady"),
            timeout=240,
            interval=1,
            what="Ready before the restart",
        )
        subprocess.run(
            [sys.executable, str(LAB_SCRIPT), "restart-libvirtd"],
            check=True,
            capture_output=True,
        )
        patch_vm(api_client, ns, "steady", {"powerState": "PoweredOff"})
        eventually(
            lambda: (
                (get(api_client, ns, "steady", vm=False) or {}).get("status", {}).get("powerState")
                == "PoweredOff"
            ),
            timeout=120,
            interval=1,
            what="a power change applied through the new libvirtd",
        )
        assert daemon.poll() is None
    # The session's connection predates the restart; a new one sees the domain off.
    fresh = libvirt.open(lab.libvirt_uri)
    try:
        dom = fresh.lookupByName(domain_of(api_client, ns, "steady"))
        assert dom.state()[0] == libvirt.VIR_DOMAIN_SHUTOFF
    finally:
        fresh.close()
