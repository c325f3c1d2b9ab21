"""Fixtures for the console e2e tests: one daemon serving the console subresources through the
lab's API server (APIService Available), and one booted busybox guest shared by the module.

The wiring (ExternalName Service to localhost, certificates) is tests/support/console.py's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.support.console import (
    register_apiservice,
    start_console_daemon,
    unregister_apiservice,
)
from tests.support.daemons import stop_daemon
from tests.support.factories import pair
from tests.support.kube import (
    create,
    get,
    namespace,
)
from tests.support.lab_access import LabInfo
from tests.support.waiting import eventually


@pytest.fixture(scope="module")
def console_daemon(
    request: pytest.FixtureRequest,
    lab: LabInfo,
    api_client: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[int, int]]:
    """A daemon serving consoles, registered as the APIService, Available: its process id (for
    tests that watch its memory) and console port. It runs with a token of deploy/'s
    ServiceAccount, so deploy/'s RBAC (console-rbac.yaml: reviews and the front proxy's
    ConfigMap) is what the tests prove enough. A module's `CONSOLE_DAEMON_ARGS` adds flags to
    its daemon."""
    proc, log, port = start_console_daemon(
        lab,
        api_client,
        tmp_path_factory.mktemp("console"),
        log_name="e2e-console-daemon.log",
        extra_args=tuple(getattr(request.module, "CONSOLE_DAEMON_ARGS", ())),
    )
    try:
        register_apiservice(lab, api_client, port)
        yield proc.pid, port
    finally:
        unregister_apiservice(api_client)
        stop_daemon(proc, log)


@pytest.fixture(scope="module")
def console_port(console_daemon: tuple[int, int]) -> int:
    """The console port of the module's daemon (`console_daemon`)."""
    return console_daemon[1]


@pytest.fixture(scope="module")
def guest_ns(api_client: client.ApiClient, console_port: int) -> Iterator[str]:
    """The namespace of the module's busybox guest (named `guest`), booted and running."""
    with namespace(api_client) as ns:
        create(api_client, pair(ns, "guest"))

        def running() -> dict[str, Any] | None:
            lm = get(api_client, ns, "guest", vm=False)
            status = (lm or {}).get("status") or {}
            return lm if status.get("powerState") == "PoweredOn" else None

        eventually(running, timeout=180, what=f"LibvirtMachine {ns}/guest PoweredOn")
        yield ns


@pytest.fixture
def tmp_kubeconfig(tmp_path: Path) -> Path:
    return tmp_path / "user.kubeconfig"


@pytest.fixture(scope="module")
def vnc_guest_ns(api_client: client.ApiClient, console_port: int) -> Iterator[str]:
    """The namespace of a busybox guest (named `desktop`) with a VNC display
    (`spec.console.graphics: VNC`), booted and running, for the module."""
    with namespace(api_client) as ns:
        vm, lm = pair(ns, "desktop")
        lm["spec"]["console"] = {"graphics": "VNC"}
        create(api_client, [vm, lm])

        def running() -> dict[str, Any] | None:
            found = get(api_client, ns, "desktop", vm=False)
            status = (found or {}).get("status") or {}
            return found if status.get("powerState") == "PoweredOn" else None

        eventually(running, timeout=180, what=f"LibvirtMachine {ns}/desktop PoweredOn")
        yield ns
