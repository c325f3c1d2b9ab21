"""Remote hosts against the lab's remote libvirtd: the daemon in remote mode, inside the lab's
client network namespace, reaching the host only over ssh or TLS on a link between lab-made
namespaces (the API server is forwarded into that namespace by the lab).

The host's state is checked directly on its libvirtd's local socket (`LabRemote.uri`), never
through the daemon under test. The remote daemon, the host's Secrets and its LibvirtHost are in
tests/support (`daemons`, `hosts`, `virt`).
"""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.support.kube import install_api
from tests.support.lab_access import LabInfo, LabRemote


@pytest.fixture(scope="session")
def remote(lab: LabInfo) -> LabRemote:
    found = lab.remote
    if found is None:
        pytest.fail("the lab has no remote host (VMAPI_LAB_REMOTE=0); run make lab-up", False)
    return found


@pytest.fixture(scope="module")
def remote_api(lab: LabInfo, api_client: client.ApiClient, remote: LabRemote) -> client.ApiClient:
    install_api(lab, api_client)
    return api_client
