"""Fixtures and helpers for the provider's e2e tests: a daemon in the lab, namespaces, pairs."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from generic.conditions import find_condition
from libvirt_provider import naming
from tests.e2e.conftest import REPO, LabInfo
from tests.support.waiting import eventually

HOST = "e2e-host"
NS_PREFIX = "lm-"
GROUP = "infrastructure.vm-api.io"
VM_GROUP = "vm-api.io"
V = "v1alpha1"


def apply(lab: LabInfo, *paths: Path) -> None:
    kubectl = Path(lab.env["PATH"].split(":")[1]) / "kubectl"
    args = [str(kubectl), "--kubeconfig", lab.kubeconfig, "apply"]
    for path in paths:
        args += ["-f", str(path)]
    subprocess.run(args, check=True, capture_output=True)


def console_log_dir(lab: LabInfo) -> Path:
    """Where the e2e daemons log serial consoles: inside the lab, so lab-down removes it. The
    daemon creates it (its parent, the lab's folder, exists), as it does under `make run`."""
    return Path(lab.dir) / "consoles"


def start_daemon(
    lab: LabInfo,
    *,
    host: str,
    log_name: str,
    kubeconfig: str | None = None,
    generic: bool = True,
    lease_namespace: str = "kube-system",
    crash_point: str | None = None,
    generic_namespaces: tuple[str, ...] = (),
    libvirt_uri: str | None = None,
) -> tuple[subprocess.Popen[bytes], Path]:
    """`libvirt-provider` against the lab, its output in a fresh log; its embedded generic
    controller serves `generic_namespaces` (patterns), or every namespace.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "VMAPI_CRASH_POINT")}
    if crash_point:
        env["VMAPI_CRASH_POINT"] = crash_point
    args = [
        sys.executable,
        "-m",
        "libvirt_provider",
        f"--kubeconfig={kubeconfig or lab.kubeconfig}",
        f"--libvirt-uri={libvirt_uri or lab.libvirt_uri}",
        f"--host={host}",
        f"--domain-types={lab.domain_type}",
        "--health-address=127.0.0.1",
        "--health-port=0",
        f"--lease-namespace={lease_namespace}",
        f"--console-log-dir={console_log_dir(lab)}",
    ]
    if not generic:
        args.append("--no-generic")
    args += [f"--generic-namespace={pattern}" for pattern in generic_namespaces]
    log = Path(os.environ.get("VMAPI_LAB_LOGS") or REPO / ".logs") / log_name
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    return proc, log


def install_api(lab: LabInfo, api_client: client.ApiClient) -> None:
    """The CRDs (established) and the sample catalog."""
    apply(lab, REPO / "crds")
    ext = client.ApiextensionsV1Api(api_client)
    for crd in ("libvirtmachines", "libvirtimages", "virtualmachines"):
        group = VM_GROUP if crd == "virtualmachines" else GROUP
        eventually(
            lambda crd=crd, group=group: any(
                c.type == "Established" and c.status == "True"
                for c in ext.read_custom_resource_definition(f"{crd}.{group}").status.conditions
                or []
            ),
            timeout=30,
            what=f"CRD {crd} established",
        )
    apply(lab, REPO / "deploy" / "samples" / "catalog.yaml")


def health_base(proc: subprocess.Popen[bytes], log: Path) -> str:
    """The base URL of a starting daemon's health endpoint, once it announced it."""
    found = eventually(
        lambda: proc.poll() is None and re.search(r"health on 127\.0\.0\.1:(\d+)", log.read_text()),
        timeout=60,
        what=f"the daemon announcing its health endpoint (log: {log})",
    )
    return f"http://127.0.0.1:{found.group(1)}"


@pytest.fixture(scope="module")
def daemon(
    lab: LabInfo, api_client: client.ApiClient, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A running daemon for the module; yields the base URL of its health endpoint."""
    install_api(lab, api_client)
    proc, log = start_daemon(
        lab,
        host=HOST,
        log_name=f"e2e-daemon-{request.module.__name__.rsplit('.', 1)[-1]}.log",
        # The tests' namespaces only, as a cluster with other tenants would run it; namespaces
        # are created right after start-up, which is when a namespace could once be missed.
        generic_namespaces=(f"{NS_PREFIX}*",),
    )
    try:
        base = health_base(proc, log)
        eventually(lambda: answers(f"{base}/healthz"), timeout=60, what="the daemon healthy")
        # Tests create their namespaces only once the embedded generic controller runs (it may
        # wait out a Lease left by an earlier daemon), so no test races its start-up.
        eventually(
            lambda: "leads: starting the generic controller" in log.read_text(),
            timeout=60,
            what=f"the daemon leading the generic controller (log: {log})",
        )
        yield base
    finally:
        proc.terminate()
        try:
            assert proc.wait(timeout=60) == 0, f"the daemon did not stop cleanly; see {log}"
        finally:
            if proc.poll() is None:
                proc.kill()


def answers(url: str, *, timeout: float = 5) -> bool:
    """Whether `url` answers 200 within `timeout` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A fresh namespace; on exit every machine in it is deleted (and waited for), then it."""
    name = NS_PREFIX + uuid.uuid4().hex[:8]
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    custom = client.CustomObjectsApi(api_client)
    for vm in custom.list_namespaced_custom_object(VM_GROUP, V, name, "virtualmachines")["items"]:
        delete_quietly(custom, VM_GROUP, name, "virtualmachines", vm["metadata"]["name"])
    for lm in custom.list_namespaced_custom_object(GROUP, V, name, "libvirtmachines")["items"]:
        delete_quietly(custom, GROUP, name, "libvirtmachines", lm["metadata"]["name"])
    eventually(
        lambda: (
            not custom.list_namespaced_custom_object(GROUP, V, name, "libvirtmachines")["items"]
            and not custom.list_namespaced_custom_object(VM_GROUP, V, name, "virtualmachines")[
                "items"
            ]
        ),
        timeout=120,
        what=f"every machine of namespace {name} gone",
    )
    core.delete_namespace(name)


@pytest.fixture
def ns(api_client: client.ApiClient, daemon: str) -> Iterator[str]:
    with namespace(api_client) as name:
        yield name


def delete_quietly(
    custom: client.CustomObjectsApi, group: str, ns: str, plural: str, name: str
) -> None:
    try:
        custom.delete_namespaced_custom_object(group, V, ns, plural, name)
    except ApiException as err:
        if err.status != 404:
            raise


def pair(ns: str, name: str, *, vm_spec: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    docs = list(yaml.safe_load_all((REPO / "deploy" / "samples" / "vm.yaml").read_text()))
    vm, lm = docs
    for doc in docs:
        doc["metadata"]["namespace"] = ns
        doc["metadata"]["name"] = name
    vm["spec"]["infrastructureRef"]["name"] = name
    vm["spec"].update(vm_spec or {})
    lm["metadata"]["annotations"]["vm-api.io/virtual-machine"] = name
    lm["metadata"].setdefault("labels", {})["infrastructure.vm-api.io/host"] = HOST
    return docs


def create(api_client: client.ApiClient, docs: list[dict[str, Any]]) -> None:
    custom = client.CustomObjectsApi(api_client)
    for doc in docs:
        group, version = doc["apiVersion"].split("/")
        plural = "virtualmachines" if doc["kind"] == "VirtualMachine" else "libvirtmachines"
        custom.create_namespaced_custom_object(
            group, version, doc["metadata"]["namespace"], plural, doc
        )


def get(api_client: client.ApiClient, ns: str, name: str, *, vm: bool) -> dict[str, Any] | None:
    custom = client.CustomObjectsApi(api_client)
    group, plural = (VM_GROUP, "virtualmachines") if vm else (GROUP, "libvirtmachines")
    try:
        obj: dict[str, Any] = custom.get_namespaced_custom_object(group, V, ns, plural, name)
        return obj
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def domain_of(api_client: client.ApiClient, ns: str, name: str) -> str:
    """The domain name of LibvirtMachine `ns/name`, derived from its uid as the daemon does."""
    machine = get(api_client, ns, name, vm=False)
    assert machine is not None, f"LibvirtMachine {ns}/{name} does not exist"
    return naming.domain_name(ns, name, str(machine["metadata"]["uid"]))


def delete_vm_and_wait(api_client: client.ApiClient, ns: str, name: str, *, what: str) -> None:
    """Delete the VirtualMachine (the generic controller deletes its LibvirtMachine) and wait
    until both are gone."""
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        VM_GROUP, V, ns, "virtualmachines", name
    )
    eventually(
        lambda: (
            get(api_client, ns, name, vm=True) is None
            and get(api_client, ns, name, vm=False) is None
        ),
        timeout=120,
        what=what,
    )


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    return dict(find_condition(((obj or {}).get("status") or {}).get("conditions"), type_) or {})


def vm_status(api_client: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    """The VirtualMachine's status ({} while it has none or is gone)."""
    return dict((get(api_client, ns, name, vm=True) or {}).get("status") or {})


def wait_ready(
    api_client: client.ApiClient,
    ns: str,
    name: str,
    *,
    what: str,
    addresses: bool = False,
    timeout: float = 240,
) -> dict[str, Any]:
    """The VM's status once it is Ready (and, with `addresses`, reports one), read once a poll."""
    found: dict[str, Any] = eventually(
        lambda: (
            (s := vm_status(api_client, ns, name)).get("ready")
            and (not addresses or s.get("addresses"))
            and s
        ),
        timeout=timeout,
        interval=1,
        what=what,
    )
    return found


def patch_vm(api_client: client.ApiClient, ns: str, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        VM_GROUP, V, ns, "virtualmachines", name, {"spec": spec}
    )


def machine_volumes(virt: libvirt.virConnect, lab: LabInfo, prefix: str) -> list[str]:
    pool = virt.storagePoolLookupByName(lab.pool)
    return [v.name() for v in pool.listAllVolumes(0) if v.name().startswith(prefix)]


def domain_names(virt: libvirt.virConnect) -> list[str]:
    return [d.name() for d in virt.listAllDomains(0)]
