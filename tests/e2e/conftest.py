"""Fixtures that connect e2e tests to the real lab (kube-apiserver and libvirtd).

The lab is brought up once per session through the same script `make lab-up` uses; when it is
already up this is a quick health check. What the lab is (`LabInfo`) and how to ask it for things
live in tests/support/lab_access.py.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

import libvirt
import pytest
from kubernetes import client, config

from tests.support.lab_access import LAB_SCRIPT, LabInfo, read_lab


@pytest.fixture(scope="session")
def lab() -> LabInfo:
    up = subprocess.run(
        [sys.executable, str(LAB_SCRIPT), "up"], check=False, capture_output=True, text=True
    )
    if up.returncode != 0:
        pytest.fail(f"the lab did not come up: {up.stderr.strip()}", pytrace=False)
    return read_lab()


@pytest.fixture(scope="session")
def api_client(lab: LabInfo) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=lab.kubeconfig)
    yield api
    api.close()


@pytest.fixture
def virt(lab: LabInfo) -> Iterator[libvirt.virConnect]:
    # Per test: a test may restart libvirtd, which ends every connection opened before.
    conn = libvirt.open(lab.libvirt_uri)
    yield conn
    # The teardown test may have stopped libvirtd under us.
    with contextlib.suppress(libvirt.libvirtError):
        conn.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Tests that take the lab down run after everything that needs it (`make e2e` also runs them
    # in a session of their own, so that other sessions' fixtures are torn down first); the
    # teardown check comes last, after `make run` on a fresh lab. Restarting the API server
    # comes before both, after everything else (it would disturb other tests' daemons).
    def order(item: pytest.Item) -> int:
        if item.get_closest_marker("lab_teardown") is not None:
            return 3
        if item.get_closest_marker("fresh_lab") is not None:
            return 2
        return 1 if item.get_closest_marker("apiserver_restart") is not None else 0

    items.sort(key=order)
