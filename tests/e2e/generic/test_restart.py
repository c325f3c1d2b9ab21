"""A controller that dies and comes back converges without duplicating anything."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client

from generic import constants as c
from tests.support.daemons import start_controller, stop_controller
from tests.support.lab_access import LabInfo
from tests.support.stub_provider import SESSION, Cluster, StubKind, remove_vms
from tests.support.waiting import eventually

READY: dict[str, Any] = {
    "powerState": "PoweredOn",
    "conditions": [
        {
            "type": "InfrastructureReady",
            "status": "True",
            "reason": "Running",
            "message": "running",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
}


def test_killed_controller_catches_up_after_restart(
    lab: LabInfo,
    api_client: client.ApiClient,
    vm_crd: None,
    stub_kind: StubKind,
    tmp_path: Path,
) -> None:
    # A prefix outside the session controller's pattern: this test runs its own controller.
    prefix = f"gen-restart-{SESSION}-"
    namespace = f"{prefix}{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": namespace}})
    cluster = Cluster(api=api_client, namespace=namespace, stub=stub_kind)
    log = tmp_path / "controller.log"
    process = start_controller(lab.kubeconfig, f"{prefix}*", log)
    try:
        cluster.create_vm("web")
        cluster.create_provider("web", backlink="web")
        cluster.write_provider_status("web", READY)
        eventually(
            lambda: (cluster.vm("web") or {}).get("status", {}).get("ready") is True,
            timeout=30,
            what="ready before the crash",
        )
        process.send_signal(signal.SIGKILL)
        process.wait()
        cluster.write_provider_status("web", {**READY, "powerState": "PoweredOff"})
        process = start_controller(lab.kubeconfig, f"{prefix}*", log)
        eventually(
            lambda: (cluster.vm("web") or {}).get("status", {}).get("powerState") == "PoweredOff",
            timeout=30,
            what="change made while the controller was down arrives after restart",
        )
        provider = cluster.provider("web")
        assert provider is not None
        assert len(provider["metadata"]["ownerReferences"]) == 1
        assert cluster.event_reasons("web").count("Adopted") == 1
        vm = cluster.vm("web")
        assert vm is not None
        assert vm["metadata"]["finalizers"] == [c.FINALIZER]
        remove_vms(cluster)
    finally:
        stop_controller(process)
        core.delete_namespace(namespace)
    assert "Traceback" not in log.read_text()
