"""Fixtures for the DaemonSet of deploy/ on the lab's node (containerd and a kubelet).

The node starts on first use (`lab.py node`; `make lab-up NODE=1` starts it up front) and stays
until `make lab-down`. The DaemonSet is applied with the lab's overlay (tests/lab/overlay) and
deleted again after the module, leaving the CRDs, RBAC and namespace for other tests. Finding the
DaemonSet's pod is in tests/support/deployment.py.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.support.deployment import (
    NAMESPACE,
    NODE_LABEL,
    OVERLAY,
    SELECTOR,
    applies,
    one_ready_pod,
)
from tests.support.kube import GROUP, VM_GROUP, V, delete_quietly, kubectl
from tests.support.lab_access import LAB_SCRIPT, REPO, LabInfo
from tests.support.waiting import eventually


@pytest.fixture(scope="session")
def node(lab: LabInfo) -> str:
    """The node's name, once it is Ready."""
    out = subprocess.run(
        [sys.executable, str(LAB_SCRIPT), "node"], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        pytest.fail(f"the lab's node did not start: {out.stderr.strip()}", pytrace=False)
    return lab.netns


@pytest.fixture(scope="module")
def daemonset(lab: LabInfo, api_client: client.ApiClient, node: str) -> Iterator[client.V1Pod]:
    """deploy/ applied through the lab's overlay and the node labelled; yields the Ready pod."""
    kubectl(lab, "apply", "-k", str(OVERLAY))
    catalog = REPO / "deploy" / "samples" / "catalog.yaml"
    eventually(
        lambda: applies(lab, catalog), timeout=30, what="the sample catalog applied (CRDs ready)"
    )
    kubectl(lab, "label", "node", node, f"{NODE_LABEL}=true", "--overwrite")
    try:
        yield one_ready_pod(api_client)
    finally:
        kubectl(lab, "label", "node", node, f"{NODE_LABEL}-")
        kubectl(lab, "-n", NAMESPACE, "delete", "daemonset", "libvirt-provider", "--wait=false")
        core = client.CoreV1Api(api_client)
        eventually(
            lambda: not core.list_namespaced_pod(NAMESPACE, label_selector=SELECTOR).items,
            timeout=120,
            what="the DaemonSet's pods gone",
        )


@pytest.fixture
def ns(api_client: client.ApiClient, daemonset: client.V1Pod) -> Iterator[str]:
    name = "node-" + uuid.uuid4().hex[:8]
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    custom = client.CustomObjectsApi(api_client)

    def items(group: str, plural: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = custom.list_namespaced_custom_object(group, V, name, plural)[
            "items"
        ]
        return found

    for vm in items(VM_GROUP, "virtualmachines"):
        delete_quietly(custom, VM_GROUP, name, "virtualmachines", vm["metadata"]["name"])
    for lm in items(GROUP, "libvirtmachines"):
        delete_quietly(custom, GROUP, name, "libvirtmachines", lm["metadata"]["name"])
    eventually(
        lambda: not items(GROUP, "libvirtmachines") and not items(VM_GROUP, "virtualmachines"),
        timeout=120,
        what=f"every machine of namespace {name} gone",
    )
    core.delete_namespace(name)
