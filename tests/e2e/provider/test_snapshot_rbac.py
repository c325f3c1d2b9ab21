"""Tenancy of snapshots, restores and migrations: deploy/snapshot-rbac.yaml, aggregated by the
lab's controller-manager into Kubernetes' own `edit` and `view` roles, checked against the lab's
RBAC-enforcing API server. A ServiceAccount bound to nothing is refused (403) a LibvirtSnapshot, a
LibvirtRestore and a LibvirtMigration; bound to `edit` in its namespace it creates each; bound to
`view` it lists them and is refused creating one. A namespace editor cannot drain a host
(`kubectl vm drain`: Forbidden). No daemon and no guest: the objects are only
written and read.
Cost: about 3 s on an idle lab.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from tests.support.console import plugin_command
from tests.support.kube import (
    GROUP,
    V,
    apply,
    install_api,
    namespace,
    service_account_kubeconfig,
)
from tests.support.lab_access import REPO, LabInfo
from tests.support.waiting import eventually


@pytest.fixture
def tenant_ns(lab: LabInfo, api_client: client.ApiClient) -> Iterator[str]:
    # The CRDs too: alone on a fresh lab, no earlier test has installed them.
    install_api(lab, api_client)
    apply(lab, REPO / "deploy" / "snapshot-rbac.yaml")
    with namespace(api_client) as ns:
        yield ns


def _as(
    lab: LabInfo, api_client: client.ApiClient, ns: str, account: str, tmp: Path
) -> client.CustomObjectsApi:
    """The custom objects API as ServiceAccount `account` of `ns` (made here)."""
    client.CoreV1Api(api_client).create_namespaced_service_account(
        ns, {"metadata": {"name": account}}
    )
    path = tmp / f"{account}.kubeconfig"
    service_account_kubeconfig(lab, api_client, path, account=account, namespace=ns)
    return client.CustomObjectsApi(config.new_client_from_config(str(path)))


def _bind(api_client: client.ApiClient, ns: str, account: str, role: str) -> None:
    client.RbacAuthorizationV1Api(api_client).create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": f"{account}-{role}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
        },
    )


def _bodies(ns: str, suffix: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            c.SNAPSHOT_PLURAL,
            {
                "apiVersion": f"{GROUP}/{V}",
                "kind": c.SNAPSHOT_KIND,
                "metadata": {"name": f"snap-{suffix}", "namespace": ns},
                "spec": {"virtualMachineName": "web"},
            },
        ),
        (
            c.RESTORE_PLURAL,
            {
                "apiVersion": f"{GROUP}/{V}",
                "kind": c.RESTORE_KIND,
                "metadata": {"name": f"restore-{suffix}", "namespace": ns},
                "spec": {"snapshotName": f"snap-{suffix}", "virtualMachineName": "web"},
            },
        ),
        (
            c.MIGRATION_PLURAL,
            {
                "apiVersion": f"{GROUP}/{V}",
                "kind": c.MIGRATION_KIND,
                "metadata": {"name": f"migration-{suffix}", "namespace": ns},
                "spec": {"machineName": "web"},
            },
        ),
    ]


def _refused(api: client.CustomObjectsApi, ns: str, plural: str, body: dict[str, Any]) -> int:
    try:
        api.create_namespaced_custom_object(GROUP, V, ns, plural, body)
    except ApiException as err:
        return int(err.status)
    return 0


def test_only_editors_take_and_restore_snapshots_and_viewers_read_them(
    lab: LabInfo, api_client: client.ApiClient, tenant_ns: str, tmp_path: Path
) -> None:
    ns = tenant_ns
    editor = _as(lab, api_client, ns, "editor", tmp_path)
    for plural, body in _bodies(ns, "a"):
        assert _refused(editor, ns, plural, body) == 403, plural

    _bind(api_client, ns, "editor", "edit")
    for plural, body in _bodies(ns, "a"):
        # RBAC and the aggregated role are read from caches: allowed within moments.
        eventually(
            lambda plural=plural, body=body: _refused(editor, ns, plural, body) == 0,
            timeout=30,
            interval=0.5,
            what=f"an editor creating {plural}",
        )

    viewer = _as(lab, api_client, ns, "viewer", tmp_path)
    _bind(api_client, ns, "viewer", "view")
    for plural, body in _bodies(ns, "b"):
        listed = eventually(
            lambda plural=plural: viewer.list_namespaced_custom_object(GROUP, V, ns, plural),
            timeout=30,
            interval=0.5,
            what=f"a viewer listing {plural}",
            not_yet=(ApiException,),
        )
        made = body["metadata"]["name"].replace("-b", "-a")
        assert [i["metadata"]["name"] for i in listed["items"]] == [made]
        assert _refused(viewer, ns, plural, body) == 403, plural
    for plural, body in _bodies(ns, "a"):
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            GROUP, V, ns, plural, body["metadata"]["name"]
        )


def test_a_namespace_editor_cannot_drain_a_host(
    lab: LabInfo, api_client: client.ApiClient, tenant_ns: str, tmp_path: Path
) -> None:
    """A drain is a patch of the cluster-scoped LibvirtHost: `edit` in a namespace does not give
    it. `kubectl vm drain` says Forbidden and exits 1; the patch itself is refused with 403."""
    ns = tenant_ns
    editor = _as(lab, api_client, ns, "tenant", tmp_path)
    _bind(api_client, ns, "tenant", "edit")
    kubeconfig = tmp_path / "tenant.kubeconfig"
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    done = subprocess.run(
        plugin_command(kubeconfig, "drain", "lab-host"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Forbidden" in done.stderr, done.stderr
    with pytest.raises(ApiException) as refused:
        editor.patch_cluster_custom_object(
            GROUP,
            V,
            c.HOST_PLURAL,
            "lab-host",
            {"spec": {"unschedulable": True, "drain": {"dryRun": True}}},
        )
    assert refused.value.status == 403
