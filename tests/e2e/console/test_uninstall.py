"""The console's aggregated API and the cluster around it: readiness says whether a daemon serves
it, and uninstalling in the documented order never leaves a namespace stuck in deletion.

Why: the API server's namespace controller must discover every API group before it finishes a
namespace's deletion; while an APIService is registered but nothing answers behind it, every
deletion in the cluster waits (kubernetes#83332 is the complaint). docs/console.md says to delete
the APIService first; this proves that is enough, with the daemons already stopped.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support.console import (
    APISERVICE,
    register_apiservice,
    start_console_daemon,
    unregister_apiservice,
)
from tests.support.daemons import answers, health_base, stop_daemon
from tests.support.lab_access import LabInfo
from tests.support.waiting import eventually

DISCOVERY_FAILURE = "NamespaceDeletionDiscoveryFailure"


def _namespace(core: client.CoreV1Api, name: str) -> client.V1Namespace | None:
    try:
        return core.read_namespace(name)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _discovery_failed(core: client.CoreV1Api, name: str) -> bool:
    ns = _namespace(core, name)
    conditions = (ns.status.conditions or []) if ns is not None and ns.status else []
    return any(c.type == DISCOVERY_FAILURE and c.status == "True" for c in conditions)


def _available(api_client: client.ApiClient) -> bool:
    reg = client.ApiregistrationV1Api(api_client)
    conditions = reg.read_api_service(APISERVICE).status.conditions or []
    return any(x.type == "Available" and x.status == "True" for x in conditions)


def test_readiness_follows_the_endpoint_and_an_uninstall_frees_namespace_deletion(
    lab: LabInfo, api_client: client.ApiClient, tmp_path: Path
) -> None:
    core = client.CoreV1Api(api_client)
    proc, log, port = start_console_daemon(
        lab, api_client, tmp_path, log_name="e2e-console-uninstall.log"
    )
    doomed = "vmapi-e2e-uninstall-" + uuid.uuid4().hex[:6]
    try:
        base = health_base(proc, log)
        eventually(
            lambda: answers(f"{base}/readyz"),
            timeout=60,
            what="the console daemon ready (its endpoint serves and trusts the front proxy)",
        )
        register_apiservice(lab, api_client, port)
        core.create_namespace({"metadata": {"name": doomed}})

        # The daemons stop with the APIService still registered; once the aggregator sees nothing
        # answers behind it, a deletion cannot finish.
        stop_daemon(proc, log)
        eventually(
            lambda: not _available(api_client),
            timeout=120,
            what="the APIService unavailable with its daemon stopped",
        )
        core.delete_namespace(doomed)
        eventually(
            lambda: _discovery_failed(core, doomed),
            timeout=60,
            what=f"namespace {doomed} held by the unanswered APIService ({DISCOVERY_FAILURE})",
        )
        assert _namespace(core, doomed) is not None

        # The uninstall's first step, as documented: the APIService goes, the deletion completes.
        unregister_apiservice(api_client)
        eventually(
            lambda: _namespace(core, doomed) is None,
            timeout=90,
            what=f"namespace {doomed} deleted once the APIService is gone",
        )
    finally:
        unregister_apiservice(api_client)
        stop_daemon(proc, log)
        if _namespace(core, doomed) is not None:
            core.delete_namespace(doomed)
