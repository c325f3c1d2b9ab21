"""The product's image, run the way deploy/daemonset.yaml runs it, against the lab.

testcontainers starts the image built from deploy/Containerfile with the DaemonSet's arguments,
user, environment and mounts: host network, libvirtd's socket directory, console-log and pool
directories, and a ServiceAccount token with the cluster CA at the in-cluster path, so the daemon
finds the API server the way a pod does (KUBERNETES_SERVICE_HOST/PORT). Only the health endpoint
moves to a free loopback port, and the guest domain type is the lab's.
"""

from __future__ import annotations

import socket
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import libvirt
import pytest
import yaml
from kubernetes import client
from testcontainers.core.container import DockerContainer

from tests.support.deployment import (
    CONTAINER_LABEL,
    NAMESPACE,
    SA_MOUNT,
    daemonset_container,
    service_account_dir,
)
from tests.support.factories import pair
from tests.support.kube import create, delete_vm_and_wait, domain_of, wait_ready
from tests.support.lab_access import LabInfo
from tests.support.virt import domain_names, machine_volumes
from tests.support.waiting import eventually

HOST = "container-host"
LEASE = "vm-api-generic-controller"
# Where libvirt's client looks for qemu:///system's socket (/run is /var/run in Debian).
SOCKET = "/var/run/libvirt/libvirt-sock"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _api_port(lab: LabInfo) -> int:
    kubeconfig = yaml.safe_load(Path(lab.kubeconfig).read_text())
    return int(urlsplit(kubeconfig["clusters"][0]["cluster"]["server"]).port or 443)


def _status(port: int, path: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return None


def _logs(container: DockerContainer) -> str:
    out, err = container.get_logs()
    return (out + err).decode(errors="replace")


def _running(container: DockerContainer) -> bool:
    wrapped = container.get_wrapped_container()
    wrapped.reload()
    return bool(wrapped.status == "running")


@dataclass(frozen=True)
class Launch:
    container: DockerContainer
    health_port: int


def _stop(container: DockerContainer) -> None:
    """SIGTERM first, so a daemon that holds the Lease hands it back, then remove it."""
    wrapped = container.get_wrapped_container()
    try:
        if _running(container):
            wrapped.kill(signal="SIGTERM")
            wrapped.wait(timeout=60)
    finally:
        container.stop()


def provider_container(
    lab: LabInfo, *, image: str, sa_dir: Path, health_port: int, without: str | None = None
) -> DockerContainer:
    """The image with the DaemonSet's arguments, user, environment and mounts, on the lab;
    `without` names a DaemonSet volume to leave out."""
    spec = daemonset_container()
    args = [arg.replace("$(POD_NAMESPACE)", NAMESPACE) for arg in spec["args"]]
    args += [
        f"--domain-types={lab.domain_type}",
        "--health-address=127.0.0.1",
        f"--health-port={health_port}",
    ]
    security = spec.get("securityContext") or {}
    user = f"{security.get('runAsUser', '')}:{security.get('runAsGroup', '')}".strip(":")
    container = DockerContainer(image).with_command(args)
    container.with_kwargs(
        network_mode="host",
        user=user or None,
        read_only=bool(security.get("readOnlyRootFilesystem")),
        security_opt=(
            ["no-new-privileges"] if security.get("allowPrivilegeEscalation") is False else []
        ),
        labels={CONTAINER_LABEL: str(lab.dir)},
    )
    # What the DaemonSet's hostPath volumes are on the lab: libvirtd there sees its own
    # /run/libvirt, /var/log/libvirt and /var/lib/libvirt as these directories.
    host_dirs = {
        "libvirt-run": lab.dir / "libvirt" / "sock",
        "console-logs": lab.dir / "libvirt" / "log" / "qemu",
        "default-pool": lab.dir / "libvirt" / "lib" / "images",
        # Not the host's /run: the container's daemon only writes there when it migrates.
        "migration-pki": lab.dir / "migration-pki",
    }
    mounts = {m["name"]: m["mountPath"] for m in spec["volumeMounts"]}
    assert set(mounts) == set(host_dirs), "the DaemonSet's volumes changed; map them here"
    for name, path in mounts.items():
        if name == without:
            continue
        host_dirs[name].mkdir(parents=True, exist_ok=True)
        container.with_volume_mapping(host_dirs[name], path, "rw")
    # The lab's pool lives outside /var/lib/libvirt: mounted at its own path, as the DaemonSet's
    # comment says for other directory pools.
    container.with_volume_mapping(lab.dir / "pool", str(lab.dir / "pool"), "rw")
    container.with_volume_mapping(sa_dir, SA_MOUNT, "ro")
    container.with_env("NODE_NAME", HOST)
    container.with_env("POD_NAMESPACE", NAMESPACE)
    container.with_env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    container.with_env("KUBERNETES_SERVICE_PORT", str(_api_port(lab)))
    return container


@pytest.fixture
def ns(api_client: client.ApiClient) -> Iterator[str]:
    name = "ctr-" + uuid.uuid4().hex[:8]
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def launch(
    lab: LabInfo, api_client: client.ApiClient, provider_image: str, tmp_path: Path
) -> Iterator[Launch]:
    """The image started as the DaemonSet starts it; removed at the end of the test."""
    port = _free_port()
    container = provider_container(
        lab,
        image=provider_image,
        sa_dir=service_account_dir(lab, api_client, tmp_path / "serviceaccount"),
        health_port=port,
    )
    container.start()
    try:
        yield Launch(container=container, health_port=port)
    finally:
        _stop(container)


def test_the_image_runs_a_machine_and_stops_cleanly_as_the_daemonset_runs_it(
    lab: LabInfo, api_client: client.ApiClient, virt: libvirt.virConnect, ns: str, launch: Launch
) -> None:
    container, port = launch.container, launch.health_port
    eventually(
        lambda: _status(port, "/healthz") == 200 or not _running(container),
        timeout=120,
        what="the container's /healthz answering 200",
    )
    assert _running(container), _logs(container)
    eventually(
        lambda: "leads: starting the generic controller" in _logs(container),
        timeout=120,
        what="the container leading the generic controller",
    )

    docs = pair(ns, "boxed")
    docs[1]["metadata"].setdefault("labels", {})["infrastructure.vm-api.io/host"] = HOST
    docs[1]["spec"]["host"] = HOST
    create(api_client, docs)
    domain = domain_of(api_client, ns, "boxed")
    wait_ready(api_client, ns, "boxed", what="the VM Ready through the container")
    delete_vm_and_wait(api_client, ns, "boxed", what="the pair deleted through the container")
    assert domain not in domain_names(virt)
    assert machine_volumes(virt, lab, f"{domain}--") == []

    leases = client.CoordinationV1Api(api_client)
    holder = leases.read_namespaced_lease(LEASE, NAMESPACE).spec.holder_identity
    assert str(holder).startswith(f"{HOST}-"), f"the container does not hold the Lease: {holder}"
    wrapped = container.get_wrapped_container()
    wrapped.kill(signal="SIGTERM")
    result = wrapped.wait(timeout=90)
    logs = _logs(container)
    assert result["StatusCode"] == 0, logs
    assert "released the lease" in logs
    holder = leases.read_namespaced_lease(LEASE, NAMESPACE).spec.holder_identity
    assert not holder, f"the stopped container still holds the Lease: {holder}"


def test_the_image_without_libvirts_socket_is_not_ready_and_says_why(
    lab: LabInfo, api_client: client.ApiClient, provider_image: str, tmp_path: Path
) -> None:
    port = _free_port()
    container = provider_container(
        lab,
        image=provider_image,
        sa_dir=service_account_dir(lab, api_client, tmp_path / "serviceaccount"),
        health_port=port,
        without="libvirt-run",
    )
    container.start()
    try:
        eventually(
            lambda: _status(port, "/readyz") == 503,
            timeout=120,
            what="the container's /readyz answering 503",
        )
        eventually(
            lambda: f"Failed to connect socket to '{SOCKET}'" in _logs(container),
            timeout=60,
            what="the container's log naming the missing socket",
        )
        assert _running(container), _logs(container)
        assert _status(port, "/readyz") == 503
    finally:
        _stop(container)
