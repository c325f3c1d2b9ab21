"""Embedding: register() on a kopf registry in another process, started and stopped by it."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator

import kopf
import pytest
from kubernetes import client, config

from generic import constants as c
from generic.adapters.operator import (
    GenericController,
    configure_settings,
    register,
    register_login,
)
from tests.support.lab_access import LabInfo
from tests.support.stub_provider import SESSION, Cluster, StubKind, remove_vms
from tests.support.waiting import eventually


@pytest.fixture
def embedded(
    lab: LabInfo, vm_crd: None, stub_kind: StubKind, api_client: client.ApiClient
) -> Iterator[tuple[GenericController, Cluster]]:
    """A kopf operator in a thread of this process hosting a generic controller not yet started,
    as a daemon that waits for its leader Lease would."""
    prefix = f"gen-embed-{SESSION}-"
    namespace = f"{prefix}{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": namespace}})
    registry = kopf.OperatorRegistry()
    register_login(registry, kubeconfig=lab.kubeconfig)
    own_api = config.new_client_from_config(config_file=lab.kubeconfig)
    controller = register(registry, api_client=own_api, namespaces=[f"{prefix}*"], autostart=False)
    settings = kopf.OperatorSettings()
    configure_settings(settings, prefix="embedding-test.vm-api.io")
    stop = threading.Event()

    def run() -> None:
        asyncio.run(
            kopf.operator(
                registry=registry,
                settings=settings,
                standalone=True,
                clusterwide=True,  # the patterns are the controller's (see register's doc)
                stop_flag=stop,
            )
        )

    thread = threading.Thread(target=run, name="embedded-kopf", daemon=True)
    thread.start()
    cluster = Cluster(api=api_client, namespace=namespace, stub=stub_kind)
    try:
        yield controller, cluster
    finally:
        controller.start()
        remove_vms(cluster)
        stop.set()
        thread.join(timeout=30)
        core.delete_namespace(namespace)


def test_controller_acts_only_while_started(
    embedded: tuple[GenericController, Cluster],
) -> None:
    controller, cluster = embedded
    cluster.create_vm("web")
    cluster.create_provider("web", backlink="web")
    # kopf reports the VM to the controller, which only remembers it until start(). (Whether
    # nothing acted meanwhile cannot be asserted here: another process embedding the generic
    # controller cluster-wide may share the lab.)
    assert not controller.running
    eventually(lambda: controller.knows(cluster.namespace, "web"), timeout=30, what="VM seen")
    controller.start()
    eventually(
        lambda: (cluster.vm("web") or {}).get("metadata", {}).get("finalizers") == [c.FINALIZER],
        timeout=30,
        what="adopted after start",
    )
    controller.stop()
    assert not controller.running
    cluster.write_provider_status(
        "web",
        {
            "conditions": [
                {
                    "type": "InfrastructureReady",
                    "status": "True",
                    "reason": "Running",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        },
    )
    controller.start()
    eventually(
        lambda: (cluster.vm("web") or {}).get("status", {}).get("ready") is True,
        timeout=30,
        what="a change made while stopped arrives after the next start",
    )
