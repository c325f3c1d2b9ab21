"""The RBAC in deploy/ is enough, and checked against an API server that enforces it.

The daemon runs here with a token of the `libvirt-provider` ServiceAccount bound by deploy/rbac.yaml
instead of the lab's admin credential, and takes a pair through its whole life: its cloud-init
Secret is unreadable (and the machine says how to allow it) until a RoleBinding opts the namespace
in.
"""

from __future__ import annotations

import base64
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest
from kubernetes import client

from libvirt_provider.constants import SECRETS_CLUSTER_ROLE
from tests.support.daemons import health_base, start_daemon
from tests.support.factories import pair
from tests.support.kube import (
    GROUP,
    apply,
    condition,
    create,
    delete_vm_and_wait,
    domain_of,
    get,
    service_account_kubeconfig,
)
from tests.support.lab_access import REPO, LabInfo
from tests.support.virt import domain_names, machine_volumes
from tests.support.waiting import eventually

HOST = "rbac-host"


@pytest.fixture
def ns(api_client: client.ApiClient) -> Iterator[str]:
    """A namespace without the admin-credential daemon of the other provider tests."""
    name = "rbac-" + uuid.uuid4().hex[:8]
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def _reason(api_client: client.ApiClient, ns: str, name: str, reason: str) -> dict[str, Any] | None:
    """The LibvirtMachine's InfrastructureReady condition, once it has `reason`."""
    found = condition(get(api_client, ns, name, vm=False), "InfrastructureReady")
    return found if found.get("reason") == reason else None


def test_the_daemon_runs_on_its_service_accounts_rbac_alone(
    lab: LabInfo, api_client: client.ApiClient, virt: libvirt.virConnect, ns: str, tmp_path: Path
) -> None:
    apply(lab, REPO / "deploy" / "namespace.yaml", REPO / "deploy" / "rbac.yaml")
    # The node restriction too; this token is bound to no Pod, so it carries no node name and
    # the policy leaves it as RBAC alone allows (test_node_restriction.py covers bound tokens).
    apply(lab, REPO / "deploy" / "node-restriction.yaml")
    kubeconfig = tmp_path / "provider.kubeconfig"
    service_account_kubeconfig(lab, api_client, kubeconfig)
    daemon, log = start_daemon(
        lab,
        host=HOST,
        log_name="e2e-rbac-daemon.log",
        kubeconfig=str(kubeconfig),
        lease_namespace="vm-api-system",
    )
    core = client.CoreV1Api(api_client)
    try:
        # Its cloud-init comes from a Secret in a namespace not opted in yet.
        user_data = base64.b64encode(b"#cloud-config\n").decode()
        core.create_namespaced_secret(
            ns, {"metadata": {"name": "ci"}, "data": {"user-data": user_data}}
        )
        bootstrap = {"cloudInit": {"userData": {"name": "ci", "key": "user-data"}}}
        docs = pair(ns, "least", vm_spec={"bootstrap": bootstrap})
        docs[1]["metadata"].setdefault("labels", {})["infrastructure.vm-api.io/host"] = HOST
        docs[1]["spec"]["host"] = HOST
        create(api_client, docs)
        domain = domain_of(api_client, ns, "least")
        refused = eventually(
            lambda: _reason(api_client, ns, "least", "SecretNotReadable"),
            timeout=60,
            what="SecretNotReadable on the LibvirtMachine",
        )
        assert SECRETS_CLUSTER_ROLE in refused["message"]
        assert domain not in domain_names(virt)
        # The admin opts the namespace in; the daemon looks again by itself (no watch on RBAC).
        client.RbacAuthorizationV1Api(api_client).create_namespaced_role_binding(
            ns,
            {
                "metadata": {"name": "vm-api-cloud-init"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": SECRETS_CLUSTER_ROLE,
                },
                "subjects": [
                    {
                        "kind": "ServiceAccount",
                        "name": "libvirt-provider",
                        "namespace": "vm-api-system",
                    }
                ],
            },
        )
        eventually(
            lambda: ((get(api_client, ns, "least", vm=True) or {}).get("status") or {}).get(
                "ready"
            ),
            timeout=240,
            interval=1,
            what="the VM Ready under the ServiceAccount's RBAC",
        )
        delete_vm_and_wait(api_client, ns, "least", what="the pair deleted")
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    assert domain not in domain_names(virt)
    assert machine_volumes(virt, lab, f"{domain}--") == []
    # Other tests leave provider kinds of other groups installed, labelled for the generic
    # controller; this deployment is not granted those, and refusals there are correct.
    refused = {
        (match.group(2), match.group(1))
        for match in re.finditer(
            r'cannot \w+ resource \\?"([^"\\]+)\\?" in API group \\?"([^"\\]*)\\?"',
            log.read_text(),
        )
    }
    ours = {"", "vm-api.io", GROUP, "coordination.k8s.io", "apiextensions.k8s.io", "events.k8s.io"}
    assert {r for r in refused if r[0] in ours} == set(), f"see {log}"


def test_a_service_account_without_rights_is_not_ready_and_says_why(
    lab: LabInfo, api_client: client.ApiClient, ns: str, tmp_path: Path
) -> None:
    core = client.CoreV1Api(api_client)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "nobody"}})
    kubeconfig = tmp_path / "nobody.kubeconfig"
    service_account_kubeconfig(lab, api_client, kubeconfig, account="nobody", namespace=ns)
    daemon, log = start_daemon(
        lab, host=HOST, log_name="e2e-rbac-nobody.log", kubeconfig=str(kubeconfig), generic=False
    )
    try:
        base = health_base(daemon, log)
        answer = eventually(
            lambda: _readyz(base) if "kubernetes:" in _readyz(base)[1] else None,
            timeout=60,
            what=f"/readyz naming the missing rights ({log})",
        )
        code, body = answer
        assert code == 503
        assert "cannot list this host's LibvirtMachines" in body
        assert "403" in body
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)


def _readyz(base: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{base}/readyz", timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""
