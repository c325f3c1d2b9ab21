"""Fixtures for the generic controller against the lab's real kube-apiserver.

One controller process (`python -m generic`) per session, serving only this session's namespaces
(`gen-e2e-<session>-*`), so parallel test runs and other controllers in the lab do not meet it.
Provider kinds are stub CRDs whose status the tests write.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from generic import constants as c
from generic.crd import CRD_PATH
from tests.e2e.conftest import REPO, LabInfo
from tests.support.waiting import eventually

SESSION = uuid.uuid4().hex[:6]
NAMESPACE_PREFIX = f"gen-e2e-{SESSION}-"


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


def stub_crd(group: str, *, kind: str = "StubMachine", labelled: bool = True) -> dict[str, Any]:
    plural = kind.lower() + "s"
    metadata: dict[str, Any] = {"name": f"{plural}.{group}"}
    if labelled:
        metadata["labels"] = {c.PROVIDER_CRD_LABEL: c.PROVIDER_CRD_LABEL_VALUE}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


@dataclass
class StubKind:
    group: str
    kind: str = "StubMachine"
    plural: str = "stubmachines"
    version: str = "v1"


@dataclass
class Cluster:
    """Helpers over the real API for one test namespace."""

    api: client.ApiClient
    namespace: str
    stub: StubKind

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def vm_body(self, name: str, *, target: str | None = None, **spec: Any) -> dict[str, Any]:
        ref = {"apiGroup": self.stub.group, "kind": self.stub.kind, "name": target or name}
        return {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"infrastructureRef": ref, **spec},
        }

    def create_vm(self, name: str, *, target: str | None = None, **spec: Any) -> dict[str, Any]:
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, self.vm_body(name, target=target, **spec)
        )
        return created

    def vm(self, name: str) -> dict[str, Any] | None:
        try:
            got: dict[str, Any] = self.custom.get_namespaced_custom_object(
                c.GROUP, c.VERSION, self.namespace, c.PLURAL, name
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return got

    def patch_vm(self, name: str, body: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, name, body
        )

    def delete_vm(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            c.GROUP, c.VERSION, self.namespace, c.PLURAL, name
        )

    def create_provider(
        self,
        name: str,
        *,
        backlink: str | None = None,
        owners: list[dict[str, Any]] | None = None,
        finalizers: list[str] | None = None,
        stub: StubKind | None = None,
    ) -> dict[str, Any]:
        kind = stub or self.stub
        meta: dict[str, Any] = {"name": name, "namespace": self.namespace}
        if backlink is not None:
            meta["annotations"] = {c.LINK_ANNOTATION: backlink}
        if owners is not None:
            meta["ownerReferences"] = owners
        if finalizers is not None:
            meta["finalizers"] = finalizers
        body = {"apiVersion": f"{kind.group}/{kind.version}", "kind": kind.kind, "metadata": meta}
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(
            kind.group, kind.version, self.namespace, kind.plural, body
        )
        return created

    def provider(self, name: str, *, stub: StubKind | None = None) -> dict[str, Any] | None:
        kind = stub or self.stub
        try:
            got: dict[str, Any] = self.custom.get_namespaced_custom_object(
                kind.group, kind.version, self.namespace, kind.plural, name
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return got

    def patch_provider(self, name: str, body: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            self.stub.group, self.stub.version, self.namespace, self.stub.plural, name, body
        )

    def write_provider_status(self, name: str, status: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            self.stub.group,
            self.stub.version,
            self.namespace,
            self.stub.plural,
            name,
            {"status": status},
        )

    def delete_provider(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            self.stub.group, self.stub.version, self.namespace, self.stub.plural, name
        )

    def condition(self, vm: str, type_: str) -> dict[str, Any] | None:
        got = self.vm(vm) or {}
        for item in got.get("status", {}).get("conditions", []):
            if item.get("type") == type_:
                return dict(item)
        return None

    def event_reasons(self, vm: str) -> list[str]:
        events = client.CoreV1Api(self.api).list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={vm}"
        )
        return [e.reason for e in events.items]


@pytest.fixture(scope="session")
def vm_crd(api_client: client.ApiClient) -> None:
    install_crd(api_client, yaml.safe_load(CRD_PATH.read_text()))


@pytest.fixture(scope="session")
def stub_kind(api_client: client.ApiClient) -> Iterator[StubKind]:
    stub = StubKind(group=f"stub-{SESSION}.generic.e2e.test")
    install_crd(api_client, stub_crd(stub.group))
    yield stub
    with contextlib.suppress(client.ApiException):
        client.ApiextensionsV1Api(api_client).delete_custom_resource_definition(
            f"{stub.plural}.{stub.group}"
        )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_controller(
    kubeconfig: str, pattern: str, log: Path, *, metrics_port: int = 0
) -> subprocess.Popen[bytes]:
    """`python -m generic` serving namespaces that match `pattern`, appending to `log`."""
    marker = "generic controller started"
    started_before = log.read_text().count(marker) if log.exists() else 0
    command = [sys.executable, "-m", "generic", "--kubeconfig", kubeconfig, "--namespace", pattern]
    if metrics_port:
        command += ["--metrics-port", str(metrics_port)]
    with log.open("a") as out:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    eventually(
        lambda: log.read_text().count(marker) > started_before,
        timeout=30,
        what="controller started",
    )
    return process


def stop_controller(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass(frozen=True)
class RunningController:
    log: Path
    metrics_url: str


@pytest.fixture(scope="session")
def controller(
    lab: LabInfo, vm_crd: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningController]:
    """The controller serving this session's namespaces."""
    log = tmp_path_factory.mktemp("generic") / "controller.log"
    port = free_port()
    process = start_controller(lab.kubeconfig, f"{NAMESPACE_PREFIX}*", log, metrics_port=port)
    yield RunningController(log=log, metrics_url=f"http://127.0.0.1:{port}/metrics")
    stop_controller(process)
    tail = log.read_text()
    assert "Traceback" not in tail, f"the controller logged a traceback:\n{tail[-4000:]}"


@pytest.fixture
def cluster(
    api_client: client.ApiClient,
    controller: RunningController,
    stub_kind: StubKind,
) -> Iterator[Cluster]:
    core = client.CoreV1Api(api_client)
    name = f"{NAMESPACE_PREFIX}{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    cluster = Cluster(api=api_client, namespace=name, stub=stub_kind)
    yield cluster
    remove_vms(cluster)
    with contextlib.suppress(client.ApiException):
        core.delete_namespace(name)


def remove_vms(cluster: Cluster) -> None:
    """Delete the namespace's VMs through the running controller and wait until they are gone.

    Namespace deletion alone is not enough: the VMs' finalizer needs the controller, which is
    stopped at the end of the session.
    """
    custom = cluster.custom
    listing = custom.list_namespaced_custom_object(c.GROUP, c.VERSION, cluster.namespace, c.PLURAL)
    for vm in listing["items"]:
        with contextlib.suppress(client.ApiException):
            cluster.delete_vm(vm["metadata"]["name"])
    # Test providers may hold a finalizer of their own; nothing else would release it.
    with contextlib.suppress(client.ApiException):
        stubs = custom.list_namespaced_custom_object(
            cluster.stub.group, cluster.stub.version, cluster.namespace, cluster.stub.plural
        )
        for provider in stubs["items"]:
            if provider["metadata"].get("finalizers"):
                cluster.patch_provider(
                    provider["metadata"]["name"], {"metadata": {"finalizers": None}}
                )

    def vms_gone() -> bool:
        listing = custom.list_namespaced_custom_object(
            c.GROUP, c.VERSION, cluster.namespace, c.PLURAL
        )
        return not listing["items"]

    eventually(vms_gone, timeout=60, what=f"VMs in {cluster.namespace} deleted")
