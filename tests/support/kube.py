"""The lab's API server as tests use it: kubectl, CRDs, the machines tests create and wait for.

Why a module of its own: nearly every e2e test, several fixtures and the bench scripts create a
linked pair, read it back, wait for it to be Ready and delete it with its namespace; one copy keeps
"Ready", "gone" and "a fresh namespace" meaning the same everywhere. The bodies themselves come
from `factories`.
"""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from generic.conditions import find_condition
from libvirt_provider import constants as c
from libvirt_provider import naming
from tests.support.lab_access import REPO, LabInfo
from tests.support.waiting import eventually

GROUP = "infrastructure.vm-api.io"
VM_GROUP = "vm-api.io"
V = "v1alpha1"
# Namespaces the provider tests make (`namespace`); the module's daemon serves only these.
NS_PREFIX = "lm-"
# The daemons' namespace: their Leases, and the remote hosts' Secrets.
SYSTEM_NAMESPACE = "kube-system"


# -- kubectl and CRDs -----------------------------------------------------------------------------


def kubectl_binary(lab: LabInfo) -> Path:
    """The lab's kubectl (second on the lab's PATH)."""
    return Path(lab.env["PATH"].split(":")[1]) / "kubectl"


def apply(lab: LabInfo, *paths: Path) -> None:
    args = [str(kubectl_binary(lab)), "--kubeconfig", lab.kubeconfig, "apply"]
    for path in paths:
        args += ["-f", str(path)]
    subprocess.run(args, check=True, capture_output=True)


def kubectl(lab: LabInfo, *args: str) -> str:
    """kubectl's output; fails (AssertionError) with its message."""
    out = subprocess.run(
        [str(kubectl_binary(lab)), "--kubeconfig", lab.kubeconfig, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr.strip()}"
    return out.stdout


def install_api(lab: LabInfo, api_client: client.ApiClient) -> None:
    """The CRDs (established) and the sample catalog."""
    apply(lab, REPO / "crds")
    ext = client.ApiextensionsV1Api(api_client)
    for crd in (
        "libvirtmachines",
        "libvirtimages",
        "libvirtsnapshots",
        "libvirtmigrations",
        "virtualmachines",
    ):
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


def install_crd(api_client: client.ApiClient, crd: dict[str, Any]) -> None:
    """Create or update `crd` and wait until it is served."""
    ext = client.ApiextensionsV1Api(api_client)
    name = crd["metadata"]["name"]
    try:
        ext.create_custom_resource_definition(crd)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
        current = ext.read_custom_resource_definition(name)
        crd = {
            **crd,
            "metadata": {**crd["metadata"], "resourceVersion": current.metadata.resource_version},
        }
        ext.replace_custom_resource_definition(name, crd)

    def established() -> bool:
        got = ext.read_custom_resource_definition(name)
        return any(
            cond.type == "Established" and cond.status == "True"
            for cond in (got.status.conditions or [])
        )

    eventually(established, timeout=30, what=f"CRD {name} established")


def service_account_kubeconfig(
    lab: LabInfo,
    api_client: client.ApiClient,
    path: Path,
    *,
    account: str = "libvirt-provider",
    namespace: str = "vm-api-system",
    bound_pod: Any = None,
) -> None:
    """A kubeconfig at `path` for the lab's API server with a token of `account`; with
    `bound_pod` (a Pod of `namespace`, as read back), a token bound to it, which carries the node
    name the Pod is scheduled on, as the tokens of a DaemonSet's pods do."""
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if bound_pod is not None:
        spec["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": bound_pod.metadata.name,
            "uid": bound_pod.metadata.uid,
        }
    token = client.CoreV1Api(api_client).create_namespaced_service_account_token(
        account, namespace, {"spec": spec}
    )
    admin = yaml.safe_load(Path(lab.kubeconfig).read_text())
    cluster = admin["clusters"][0]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "provider", "user": {"token": token.status.token}}],
                "contexts": [
                    {
                        "name": "provider",
                        "context": {"cluster": cluster["name"], "user": "provider"},
                    }
                ],
                "current-context": "provider",
            }
        )
    )


# -- namespaces and machines ----------------------------------------------------------------------


@contextlib.contextmanager
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A fresh namespace; on exit every machine in it is deleted (and waited for), then it."""
    name = NS_PREFIX + uuid.uuid4().hex[:8]
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        # Also when the test failed: its guests would otherwise run on, served by later daemons.
        custom = client.CustomObjectsApi(api_client)
        for vm in custom.list_namespaced_custom_object(VM_GROUP, V, name, "virtualmachines")[
            "items"
        ]:
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
        # Snapshots and restores hold finalizers and volumes: left to the namespace's deletion,
        # they would outlive the daemon that releases them (a snapshot with dependents is
        # released only once the machines above are gone, at its next look: within seconds).
        kinds = (c.RESTORE_PLURAL, c.SNAPSHOT_PLURAL)
        for plural in kinds:
            for item in _listed(custom, name, plural):
                delete_quietly(custom, GROUP, name, plural, item["metadata"]["name"])
        eventually(
            lambda: not any(_listed(custom, name, plural) for plural in kinds),
            timeout=60,
            what=f"every snapshot and restore of namespace {name} gone",
        )
        core.delete_namespace(name)


def _listed(custom: client.CustomObjectsApi, ns: str, plural: str) -> list[dict[str, Any]]:
    """The namespace's objects of `plural`; none when its CRD is not installed."""
    try:
        items: list[dict[str, Any]] = custom.list_namespaced_custom_object(GROUP, V, ns, plural)[
            "items"
        ]
    except ApiException as err:
        if err.status == 404:
            return []
        raise
    return items


def delete_quietly(
    custom: client.CustomObjectsApi, group: str, ns: str, plural: str, name: str
) -> None:
    try:
        custom.delete_namespaced_custom_object(group, V, ns, plural, name)
    except ApiException as err:
        if err.status != 404:
            raise


def create(api_client: client.ApiClient, docs: list[dict[str, Any]]) -> None:
    custom = client.CustomObjectsApi(api_client)
    for doc in docs:
        group, version = doc["apiVersion"].split("/")
        plural = "virtualmachines" if doc["kind"] == "VirtualMachine" else "libvirtmachines"
        custom.create_namespaced_custom_object(
            group, version, doc["metadata"]["namespace"], plural, doc
        )


def create_all(api: client.ApiClient, docs: list[list[dict[str, Any]]]) -> None:
    for pair_docs in docs:
        create(api, pair_docs)


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


def wait_reason(
    api: client.ApiClient,
    ns: str,
    name: str,
    reason: str,
    *,
    vm: bool = False,
    timeout: float = 60,
    what: str,
) -> dict[str, Any]:
    """The InfrastructureReady condition of the LibvirtMachine (or with `vm`, the VM) once its
    reason is `reason`."""
    found: dict[str, Any] = eventually(
        lambda: (
            (cond := condition(get(api, ns, name, vm=vm), "InfrastructureReady")).get("reason")
            == reason
            and cond
        ),
        timeout=timeout,
        what=what,
    )
    return found


def patch_vm(api_client: client.ApiClient, ns: str, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        VM_GROUP, V, ns, "virtualmachines", name, {"spec": spec}
    )
