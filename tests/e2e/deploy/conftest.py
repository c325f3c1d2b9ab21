"""Fixtures for running the product's container image in the lab, through testcontainers.

The image is built from deploy/Containerfile by the lab (cached by content, see
tests/lab/image/build.sh); testcontainers talks to podman's Docker-compatible API on a socket the
lab starts. testcontainers' reaper container is disabled: it would have to be pulled, and the lab
removes its own containers on `make lab-down` (they carry its label). What the tests read from
deploy/ is in tests/support/deployment.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.support.kube import apply, install_api
from tests.support.lab_access import REPO, LabInfo, lab_output_line


@pytest.fixture(scope="session")
def provider_image(lab: LabInfo) -> str:
    """The image's name (tagged with its content key), built on first use."""
    return lab_output_line("image")


@pytest.fixture(scope="session", autouse=True)
def container_api(lab: LabInfo) -> Iterator[str]:
    """DOCKER_HOST for testcontainers: podman's API service, started by the lab."""
    socket = lab_output_line("container-api")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DOCKER_HOST", f"unix://{socket}")
        mp.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
        yield f"unix://{socket}"


@pytest.fixture(scope="session", autouse=True)
def deployed_rbac(lab: LabInfo, api_client: client.ApiClient) -> None:
    """CRDs, namespace, ServiceAccount and RBAC from deploy/, and the sample catalog."""
    apply(lab, REPO / "deploy" / "namespace.yaml", REPO / "deploy" / "rbac.yaml")
    install_api(lab, api_client)
