"""Fixtures for running the product's container image in the lab, through testcontainers.

The image is built from deploy/Containerfile by the lab (cached by content, see
tests/lab/image/build.sh); testcontainers talks to podman's Docker-compatible API on a socket the
lab starts. testcontainers' reaper container is disabled: it would have to be pulled, and the lab
removes its own containers on `make lab-down` (they carry its label).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.e2e.conftest import LAB_SCRIPT, REPO, LabInfo
from tests.e2e.provider.conftest import apply, install_api

NAMESPACE = "vm-api-system"
SERVICE_ACCOUNT = "libvirt-provider"
# Where the client library looks for in-cluster credentials.
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
CONTAINER_LABEL = "io.vm-api.lab"


def _lab_command(command: str) -> str:
    out = subprocess.run(
        [sys.executable, str(LAB_SCRIPT), command], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        pytest.fail(f"lab {command} failed: {out.stderr.strip()}", pytrace=False)
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def provider_image(lab: LabInfo) -> str:
    """The image's name (tagged with its content key), built on first use."""
    return _lab_command("image")


@pytest.fixture(scope="session", autouse=True)
def container_api(lab: LabInfo) -> Iterator[str]:
    """DOCKER_HOST for testcontainers: podman's API service, started by the lab."""
    socket = _lab_command("container-api")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DOCKER_HOST", f"unix://{socket}")
        mp.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
        yield f"unix://{socket}"


def daemonset_container() -> dict[str, Any]:
    """The provider container of deploy/daemonset.yaml: what the tests run the image like."""
    daemonset = yaml.safe_load((REPO / "deploy" / "daemonset.yaml").read_text())
    containers: list[dict[str, Any]] = daemonset["spec"]["template"]["spec"]["containers"]
    return containers[0]


@pytest.fixture(scope="session", autouse=True)
def deployed_rbac(lab: LabInfo, api_client: client.ApiClient) -> None:
    """CRDs, namespace, ServiceAccount and RBAC from deploy/, and the sample catalog."""
    apply(lab, REPO / "deploy" / "namespace.yaml", REPO / "deploy" / "rbac.yaml")
    install_api(lab, api_client)


def service_account_dir(lab: LabInfo, api_client: client.ApiClient, path: Path) -> Path:
    """A directory laid out like the kubelet's projected ServiceAccount volume."""
    token = client.CoreV1Api(api_client).create_namespaced_service_account_token(
        SERVICE_ACCOUNT, NAMESPACE, {"spec": {"expirationSeconds": 3600}}
    )
    path.mkdir(parents=True, exist_ok=True)
    (path / "token").write_text(token.status.token)
    (path / "ca.crt").write_bytes((lab.dir / "pki" / "ca.crt").read_bytes())
    (path / "namespace").write_text(NAMESPACE)
    return path
