"""Fixtures for the generic controller against the lab's real kube-apiserver.

One controller process (`python -m generic`) per session, serving only this session's namespaces
(`gen-e2e-<session>-*`), so parallel test runs and other controllers in the lab do not meet it.
Provider kinds are stub CRDs whose status the tests write (tests/support/stub_provider.py).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client

from generic.crd import CRD_PATH
from tests.support.daemons import RunningController, free_port, start_controller, stop_controller
from tests.support.factories import stub_crd
from tests.support.kube import install_crd
from tests.support.lab_access import LabInfo
from tests.support.stub_provider import NAMESPACE_PREFIX, SESSION, Cluster, StubKind, remove_vms


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
