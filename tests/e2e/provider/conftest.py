"""Fixtures for the provider's e2e tests: a daemon in the lab for the module, a namespace per test.

The daemon, the pairs and the API helpers the tests use are in tests/support (`daemons`,
`factories`, `kube`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.support.daemons import answers, health_base, start_daemon, stop_daemon
from tests.support.factories import HOST
from tests.support.kube import NS_PREFIX, install_api, namespace
from tests.support.lab_access import LabInfo
from tests.support.waiting import eventually


def _lab_args(request: pytest.FixtureRequest, lab: LabInfo) -> tuple[str, ...]:
    """Flags a module derives from the lab (its `daemon_lab_args(lab)`), e.g. the console's
    certificates in the lab's PKI."""
    derive = getattr(request.module, "daemon_lab_args", None)
    return tuple(derive(lab)) if derive is not None else ()


@pytest.fixture(scope="module")
def daemon(
    lab: LabInfo, api_client: client.ApiClient, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A running daemon for the module; yields the base URL of its health endpoint."""
    install_api(lab, api_client)
    proc, log = start_daemon(
        lab,
        host=HOST,
        log_name=f"e2e-daemon-{request.module.__name__.rsplit('.', 1)[-1]}.log",
        # The tests' namespaces only, as a cluster with other tenants would run it; namespaces
        # are created right after start-up, which is when a namespace could once be missed.
        generic_namespaces=(f"{NS_PREFIX}*",),
        # A module may add flags of its own (DAEMON_ARGS), e.g. a shorter wait it exercises.
        extra_args=tuple(getattr(request.module, "DAEMON_ARGS", ())) + _lab_args(request, lab),
    )
    try:
        base = health_base(proc, log)
        eventually(lambda: answers(f"{base}/healthz"), timeout=60, what="the daemon healthy")
        # Tests create their namespaces only once the embedded generic controller runs (it may
        # wait out a Lease left by an earlier daemon), so no test races its start-up.
        eventually(
            lambda: "leads: starting the generic controller" in log.read_text(),
            timeout=60,
            what=f"the daemon leading the generic controller (log: {log})",
        )
        yield base
    finally:
        stop_daemon(proc, log)


@pytest.fixture
def ns(api_client: client.ApiClient, daemon: str) -> Iterator[str]:
    with namespace(api_client) as name:
        yield name
