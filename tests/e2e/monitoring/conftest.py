"""The alerts' e2e world: one daemon serving one of the lab's extra hosts, and a real Prometheus
scraping it with deploy/monitoring/rules.yaml (every alert's `for:` shortened), for the module.

An extra host, not the main libvirtd: the tests take its libvirtd down and add a pool to it, which
no other module's daemon sees meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from tests.support.daemons import Daemon, health_base, log_dir, start_daemon, stop_daemon
from tests.support.hosts import host_ready
from tests.support.kube import install_api
from tests.support.lab_access import LabInfo, host_libvirtd
from tests.support.prometheus import Prometheus, start_prometheus
from tests.support.waiting import eventually

_JOB = "libvirt-provider"


@pytest.fixture(scope="module")
def watched(lab: LabInfo, api_client: client.ApiClient) -> Iterator[Daemon]:
    """The daemon of the lab's first extra host, its LibvirtHost Ready."""
    assert lab.hosts, "the alerts' tests need one of the lab's extra hosts (VMAPI_LAB_HOST_COUNT)"
    host = lab.hosts[0]
    install_api(lab, api_client)
    proc, log = start_daemon(
        lab,
        host=host.name,
        libvirt_uri=host.uri,
        log_name=f"e2e-monitoring-{host.name}.log",
        generic=False,
    )
    try:
        health_base(proc, log)
        eventually(
            lambda: host_ready(api_client, host.name),
            timeout=90,
            what=f"LibvirtHost {host.name} Ready (log: {log})",
        )
        yield Daemon(host, proc, log)
    finally:
        # A test that failed half-way must not leave the host's libvirtd down for the next module.
        host_libvirtd(host.name, up=True)
        stop_daemon(proc, log)


@pytest.fixture(scope="module")
def prometheus(watched: Daemon, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Prometheus scraping the daemon's /metrics (beside its probes, on loopback)."""
    server = start_prometheus(
        [urlsplit(health_base(watched.proc, watched.log)).netloc],
        job=_JOB,
        workdir=tmp_path_factory.mktemp("prometheus"),
        log=log_dir() / "e2e-prometheus.log",
    )
    try:
        # Scraped, with the daemon's own host label (honor_labels), before any test starts.
        eventually(
            lambda: server.query(f'vmapi_host_ready{{job="{_JOB}",host="{watched.host.name}"}}'),
            timeout=30,
            what=f"prometheus scraping the daemon (log: {server.log})",
        )
        yield server
    finally:
        server.stop()
