"""The daemon in the lab, driven through the Kubernetes API the way a user drives kubectl.

One daemon (`libvirt-provider`, both controllers) runs for this module against the lab's
kube-apiserver and libvirtd; every test works in a namespace of its own and leaves no domain and
no volume behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from lxml import etree
from lxml.builder import E

from libvirt_provider import naming
from tests.e2e.conftest import REPO, LabInfo
from tests.eventually import eventually

HOST = "e2e-host"
GROUP = "infrastructure.vm-api.io"
VM_GROUP = "vm-api.io"
V = "v1alpha1"


def _apply(lab: LabInfo, *paths: Path) -> None:
    kubectl = Path(lab.env["PATH"].split(":")[1]) / "kubectl"
    args = [str(kubectl), "--kubeconfig", lab.kubeconfig, "apply"]
    for path in paths:
        args += ["-f", str(path)]
    subprocess.run(args, check=True, capture_output=True)


@pytest.fixture(scope="module")
def daemon(lab: LabInfo, api_client: client.ApiClient, tmp_path_factory: Any) -> Iterator[Path]:
    _apply(lab, REPO / "crds")
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
    _apply(lab, REPO / "deploy" / "samples" / "catalog.yaml")
    log = Path(os.environ.get("VMAPI_LAB_LOGS") or REPO / ".logs") / "e2e-daemon.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "libvirt_provider",
                "--kubeconfig",
                lab.kubeconfig,
                "--libvirt-uri",
                lab.libvirt_uri,
                "--host",
                HOST,
                "--domain-types",
                lab.domain_type,
                "--health-address",
                "127.0.0.1",
                "--health-port",
                "0",
                "--lease-namespace",
                "kube-system",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield log
    finally:
        proc.terminate()
        try:
            assert proc.wait(timeout=60) == 0, f"the daemon did not stop cleanly; see {log}"
        finally:
            if proc.poll() is None:
                proc.kill()


@pytest.fixture
def ns(api_client: client.ApiClient, daemon: Path) -> Iterator[str]:
    name = "lm-" + uuid.uuid4().hex[:8]
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    custom = client.CustomObjectsApi(api_client)
    for vm in custom.list_namespaced_custom_object(VM_GROUP, V, name, "virtualmachines")["items"]:
        _delete_quietly(custom, VM_GROUP, name, "virtualmachines", vm["metadata"]["name"])
    for lm in custom.list_namespaced_custom_object(GROUP, V, name, "libvirtmachines")["items"]:
        _delete_quietly(custom, GROUP, name, "libvirtmachines", lm["metadata"]["name"])
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


def _delete_quietly(
    custom: client.CustomObjectsApi, group: str, ns: str, plural: str, name: str
) -> None:
    try:
        custom.delete_namespaced_custom_object(group, V, ns, plural, name)
    except ApiException as err:
        if err.status != 404:
            raise


def _pair(ns: str, name: str, *, vm_spec: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    docs = list(yaml.safe_load_all((REPO / "deploy" / "samples" / "vm.yaml").read_text()))
    vm, lm = docs
    for doc in docs:
        doc["metadata"]["namespace"] = ns
        doc["metadata"]["name"] = name
    vm["spec"]["infrastructureRef"]["name"] = name
    vm["spec"].update(vm_spec or {})
    lm["metadata"]["annotations"]["vm-api.io/virtual-machine"] = name
    lm["metadata"]["labels"]["infrastructure.vm-api.io/host"] = HOST
    return docs


def _create(api_client: client.ApiClient, docs: list[dict[str, Any]]) -> None:
    custom = client.CustomObjectsApi(api_client)
    for doc in docs:
        group, version = doc["apiVersion"].split("/")
        plural = "virtualmachines" if doc["kind"] == "VirtualMachine" else "libvirtmachines"
        custom.create_namespaced_custom_object(
            group, version, doc["metadata"]["namespace"], plural, doc
        )


def _get(api_client: client.ApiClient, ns: str, name: str, *, vm: bool) -> dict[str, Any] | None:
    custom = client.CustomObjectsApi(api_client)
    group, plural = (VM_GROUP, "virtualmachines") if vm else (GROUP, "libvirtmachines")
    try:
        obj: dict[str, Any] = custom.get_namespaced_custom_object(group, V, ns, plural, name)
        return obj
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def _patch_vm(api_client: client.ApiClient, ns: str, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        VM_GROUP, V, ns, "virtualmachines", name, {"spec": spec}
    )


def _machine_volumes(virt: libvirt.virConnect, lab: LabInfo, prefix: str) -> list[str]:
    pool = virt.storagePoolLookupByName(lab.pool)
    return [v.name() for v in pool.listAllVolumes(0) if v.name().startswith(prefix)]


def _domain_names(virt: libvirt.virConnect) -> list[str]:
    return [d.name() for d in virt.listAllDomains(0)]


def test_a_linked_pair_boots_powers_and_deletes_cleanly(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str
) -> None:
    name = "web"
    _create(api_client, _pair(ns, name))
    domain = naming.domain_name(ns, name)

    def ready_with_address() -> dict[str, Any] | None:
        vm = _get(api_client, ns, name, vm=True)
        status = (vm or {}).get("status") or {}
        ok = status.get("ready") and status.get("powerState") == "PoweredOn"
        return vm if ok and status.get("addresses") else None

    vm = eventually(ready_with_address, timeout=240, interval=1, what="VM Ready with an address")
    status = vm["status"]
    assert status["addresses"][0]["address"].startswith(lab.env.get("VMAPI_LAB_SUBNET", "10.213"))
    lm = _get(api_client, ns, name, vm=False)
    assert lm is not None
    assert status["providerID"] == f"libvirt://{HOST}/{lm['metadata']['uid']}"
    assert _condition(vm, "Ready")["status"] == "True"
    dom = virt.lookupByName(domain)
    assert dom.UUIDString() == lm["metadata"]["uid"]

    # The test guest honours the ACPI power button: TrySoft needs no force.
    _patch_vm(api_client, ns, name, {"powerState": "PoweredOff"})
    eventually(
        lambda: (
            (_get(api_client, ns, name, vm=True) or {}).get("status", {}).get("powerState")
            == "PoweredOff"
        ),
        timeout=120,
        what="PoweredOff reported on the VM",
    )
    assert dom.state()[0] == libvirt.VIR_DOMAIN_SHUTOFF
    assert not (_get(api_client, ns, name, vm=True) or {})["status"].get("addresses")

    _patch_vm(api_client, ns, name, {"powerState": "Suspended"})
    _patch_vm(api_client, ns, name, {"powerState": "PoweredOn"})
    eventually(ready_with_address, timeout=240, interval=1, what="Ready again after power-on")

    _patch_vm(api_client, ns, name, {"powerState": "Suspended"})
    eventually(
        lambda: (
            (_get(api_client, ns, name, vm=True) or {}).get("status", {}).get("powerState")
            == "Suspended"
        ),
        timeout=120,
        what="Suspended reported on the VM",
    )
    assert dom.hasManagedSaveImage(0)

    _patch_vm(api_client, ns, name, {"powerState": "PoweredOn"})
    eventually(ready_with_address, timeout=240, interval=1, what="resumed from the saved state")

    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        VM_GROUP, V, ns, "virtualmachines", name
    )
    eventually(
        lambda: (
            _get(api_client, ns, name, vm=True) is None
            and _get(api_client, ns, name, vm=False) is None
        ),
        timeout=120,
        what="the VM and its LibvirtMachine gone",
    )
    assert domain not in _domain_names(virt)
    assert _machine_volumes(virt, lab, f"{domain}--") == []


def test_a_one_sided_link_creates_nothing_and_says_why(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str
) -> None:
    vm, lm = _pair(ns, "lonely")
    vm["spec"]["infrastructureRef"]["name"] = "someone-else"
    _create(api_client, [vm, lm])
    cond = eventually(
        lambda: _condition(_get(api_client, ns, "lonely", vm=False), "InfrastructureReady") or None,
        timeout=60,
        what="a condition on the LibvirtMachine",
    )
    assert cond["status"] == "False"
    assert cond["reason"] == "LinkMismatch"
    assert "someone-else" in cond["message"]
    domain = naming.domain_name(ns, "lonely")
    assert domain not in _domain_names(virt)
    assert _machine_volumes(virt, lab, f"{domain}--") == []


def test_unsupported_configuration_is_reported_and_nothing_is_built(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str
) -> None:
    _create(api_client, _pair(ns, "spot", vm_spec={"scheduling": {"spot": True}}))

    def reported() -> dict[str, Any] | None:
        vm = _get(api_client, ns, "spot", vm=True)
        cond = _condition(vm, "InfrastructureReady")
        return cond if cond.get("reason") == "UnsupportedByProvider" else None

    cond = eventually(reported, timeout=60, what="UnsupportedByProvider on the VM")
    assert "spot" in cond["message"]
    events = client.CoreV1Api(api_client).list_namespaced_event(ns).items
    assert any(e.reason == "UnsupportedByProvider" and e.type == "Warning" for e in events)
    domain = naming.domain_name(ns, "spot")
    assert domain not in _domain_names(virt)
    assert _machine_volumes(virt, lab, f"{domain}--") == []


def test_a_foreign_domain_with_our_name_is_refused_and_left_intact(
    api_client: client.ApiClient, virt: libvirt.virConnect, lab: LabInfo, ns: str
) -> None:
    domain = naming.domain_name(ns, "squatted")
    foreign_uuid = str(uuid.uuid4())
    xml = E.domain(
        E.name(domain),
        E.uuid(foreign_uuid),
        E.memory("64", unit="MiB"),
        E.os(E.type("hvm")),
        type="qemu",
    )
    foreign = virt.defineXML(etree.tostring(xml, encoding="unicode"))
    try:
        _create(api_client, _pair(ns, "squatted"))
        cond = eventually(
            lambda: (
                _condition(_get(api_client, ns, "squatted", vm=False), "InfrastructureReady")
                or None
            ),
            timeout=60,
            what="a condition on the LibvirtMachine",
        )
        assert cond["reason"] == "ForeignDomain"
        assert foreign_uuid in cond["message"]
        assert virt.lookupByName(domain).UUIDString() == foreign_uuid
        assert _machine_volumes(virt, lab, f"{domain}--") == []
    finally:
        foreign.undefine()
