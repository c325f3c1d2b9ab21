"""deploy/ run in the lab: the product's container image as the DaemonSet runs it, and the
DaemonSet itself on the lab's node.

Why a module of its own: the container tests and the node tests check that deploy/'s manifests
work as written; what they read from those manifests (the container's spec, the namespace, the
ServiceAccount) and how they find the DaemonSet's pod is kept in one place, beside each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from tests.support.kube import kubectl
from tests.support.lab_access import REPO, LabInfo
from tests.support.waiting import eventually

NAMESPACE = "vm-api-system"
SERVICE_ACCOUNT = "libvirt-provider"
# Where the client library looks for in-cluster credentials.
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
CONTAINER_LABEL = "io.vm-api.lab"
# The DaemonSet's pods, and the label that puts a node under it.
SELECTOR = "app.kubernetes.io/name=libvirt-provider"
NODE_LABEL = "infrastructure.vm-api.io/libvirt"
OVERLAY = REPO / "tests" / "lab" / "overlay"


# -- the container image --------------------------------------------------------------------------


def daemonset_container() -> dict[str, Any]:
    """The provider container of deploy/daemonset.yaml: what the tests run the image like."""
    daemonset = yaml.safe_load((REPO / "deploy" / "daemonset.yaml").read_text())
    containers: list[dict[str, Any]] = daemonset["spec"]["template"]["spec"]["containers"]
    return containers[0]


def service_account_dir(lab: LabInfo, api_client: client.ApiClient, path: Path) -> Path:
    """A directory laid out like the kubelet's projected ServiceAccount volume."""
    token = client.CoreV1Api(api_client).create_namespaced_service_account_token(
        SERVICE_ACCOUNT, NAMESPACE, {"spec": {"expirationSeconds": 3600}}
    )
    path.mkdir(parents=True, exist_ok=True)
    (path / "token").write_text(token.status.token)
    (path / "ca.crt").write_bytes((lab.dir / "pki" / "ca.crt").read_bytes())
    (path / "namespace").write_text(NAMESPACE)
    return path


# -- the DaemonSet on the lab's node --------------------------------------------------------------


def applies(lab: LabInfo, path: Path) -> bool:
    """Whether `kubectl apply -f path` succeeds (it fails while CRDs are not served yet)."""
    try:
        kubectl(lab, "apply", "-f", str(path))
    except AssertionError:
        return False
    return True


def ready_pods(api_client: client.ApiClient) -> list[client.V1Pod]:
    pods = client.CoreV1Api(api_client).list_namespaced_pod(NAMESPACE, label_selector=SELECTOR)
    return [
        p
        for p in pods.items
        if p.metadata.deletion_timestamp is None
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]


def one_ready_pod(api_client: client.ApiClient, *, other_than: str = "") -> client.V1Pod:
    """The DaemonSet's one pod once it is Ready (and, with other_than, is a new pod)."""

    def found() -> client.V1Pod | None:
        pods = ready_pods(api_client)
        return pods[0] if len(pods) == 1 and pods[0].metadata.uid != other_than else None

    pod: client.V1Pod = eventually(
        found, timeout=180, interval=0.5, what="the DaemonSet's pod Ready"
    )
    return pod
