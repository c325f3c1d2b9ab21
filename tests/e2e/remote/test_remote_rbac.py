"""deploy/remote's RBAC is enough for a remote host, and reads Secrets in its namespace only.

The remote-mode daemon runs with a token of the `libvirt-provider-remote` ServiceAccount, bound
as deploy/ and deploy/remote/ bind it, against an API server that enforces it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from tests.support.daemons import start_remote_daemon
from tests.support.factories import remote_pair
from tests.support.hosts import (
    delete_secret,
    forget_host,
    put_secret,
    set_host,
    ssh_data,
    wait_connected,
)
from tests.support.kube import (
    GROUP,
    SYSTEM_NAMESPACE,
    V,
    apply,
    condition,
    create,
    get,
    namespace,
    service_account_kubeconfig,
)
from tests.support.lab_access import REPO, LabInfo, LabRemote
from tests.support.virt import host_domains
from tests.support.waiting import eventually

DEPLOY_NAMESPACE = "vm-api-system"
SECRET = "e2e-remote-rbac"


def test_the_remote_daemon_runs_on_its_service_accounts_rbac_alone(
    lab: LabInfo, remote_api: client.ApiClient, remote: LabRemote, tmp_path: Path
) -> None:
    apply(lab, REPO / "deploy" / "namespace.yaml", REPO / "deploy" / "rbac.yaml")
    apply(lab, REPO / "deploy" / "remote" / "rbac.yaml")
    kubeconfig = tmp_path / "remote.kubeconfig"
    service_account_kubeconfig(
        lab, remote_api, kubeconfig, account="libvirt-provider-remote", namespace=DEPLOY_NAMESPACE
    )
    # What the account may not do: read a Secret outside its own namespace.
    put_secret(remote_api, SECRET, ssh_data(remote))
    as_provider = config.new_client_from_config(str(kubeconfig))
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(as_provider).read_namespaced_secret(SECRET, SYSTEM_NAMESPACE)
    assert refused.value.status == 403
    delete_secret(remote_api, SECRET)

    put_secret(remote_api, SECRET, ssh_data(remote), ns=DEPLOY_NAMESPACE)
    set_host(remote_api, remote, {"uri": remote.ssh_uri, "secretRef": {"name": SECRET}})
    daemon = start_remote_daemon(
        lab,
        remote,
        "e2e-remote-rbac",
        generic=False,
        kubeconfig=str(kubeconfig),
        lease_namespace=DEPLOY_NAMESPACE,
    )
    try:
        wait_connected(remote_api, remote, c.REASON_CONNECTED)
        with namespace(remote_api) as ns:
            # No generic controller here: the LibvirtMachine alone is built (powered off), and
            # deleted directly.
            create(remote_api, remote_pair(ns, "least", remote, powerState="PoweredOff"))
            eventually(
                lambda: (
                    condition(get(remote_api, ns, "least", vm=False), "InfrastructureReady").get(
                        "status"
                    )
                    == "True"
                ),
                timeout=120,
                what="the machine built by the remote daemon on its own RBAC",
            )
            machine = get(remote_api, ns, "least", vm=False) or {}
            domain = machine["status"]["providerMetadata"]["domainName"]
            assert domain in host_domains(remote)
            client.CustomObjectsApi(remote_api).delete_namespaced_custom_object(
                GROUP, V, ns, "libvirtmachines", "least"
            )
            eventually(
                lambda: get(remote_api, ns, "least", vm=False) is None,
                timeout=120,
                what="the machine deleted",
            )
            assert domain not in host_domains(remote)
        assert daemon.refusals() == [], "the daemon met a 403 on its own RBAC"
    finally:
        daemon.stop()
        forget_host(remote_api, remote)
        delete_secret(remote_api, SECRET, ns=DEPLOY_NAMESPACE)
