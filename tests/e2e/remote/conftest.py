"""Remote hosts against the lab's remote libvirtd: the daemon in remote mode, inside the lab's
client network namespace, reaching the host only over ssh or TLS on a link between lab-made
namespaces (the API server is forwarded into that namespace by the lab).

The host's state is checked directly on its libvirtd's local socket (`LabRemote.uri`), never
through the daemon under test.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libvirt
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from tests.e2e.conftest import LabInfo, LabRemote
from tests.e2e.provider.conftest import GROUP, V, condition, install_api, pair
from tests.support.waiting import eventually

REPO = Path(__file__).resolve().parents[3]
# The daemons' namespace: their Leases, and the remote hosts' Secrets.
SYSTEM_NAMESPACE = "kube-system"
HOSTS = "libvirthosts"


@pytest.fixture(scope="session")
def remote(lab: LabInfo) -> LabRemote:
    found = lab.remote
    if found is None:
        pytest.fail("the lab has no remote host (VMAPI_LAB_REMOTE=0); run make lab-up", False)
    return found


@dataclass
class RemoteDaemon:
    identity: str
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, *, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
            self.proc.wait(30)
            return
        self.proc.terminate()
        try:
            assert self.proc.wait(timeout=60) == 0, f"{self.identity} did not stop cleanly"
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def start_remote_daemon(
    lab: LabInfo,
    remote: LabRemote,
    identity: str,
    *,
    generic: bool = True,
    kubeconfig: str | None = None,
    lease_namespace: str = SYSTEM_NAMESPACE,
) -> RemoteDaemon:
    """`libvirt-provider --remote` in the lab's client namespace, its output in a fresh log."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "VMAPI_CRASH_POINT")}
    logs = Path(os.environ.get("VMAPI_LAB_LOGS") or REPO / ".logs")
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"e2e-remote-{identity}.log"
    args = [
        "ip",
        "netns",
        "exec",
        remote.client_netns,
        sys.executable,
        "-m",
        "libvirt_provider",
        "--remote",
        f"--identity={identity}",
        f"--kubeconfig={kubeconfig or lab.kubeconfig}",
        f"--domain-types={lab.domain_type}",
        "--health-address=127.0.0.1",
        "--health-port=0",
        f"--lease-namespace={lease_namespace}",
        f"--credentials-dir={Path(lab.dir) / 'remote-credentials'}",
    ]
    if not generic:
        args.append("--no-generic")
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(REPO))
    daemon = RemoteDaemon(identity, proc, log)
    eventually(
        lambda: proc.poll() is None and "in remote mode as" in daemon.text(),
        timeout=60,
        what=f"remote daemon {identity} started (log: {log})",
    )
    return daemon


def metrics(daemon: RemoteDaemon, remote: LabRemote) -> str:
    """The daemon's /metrics, read inside its network namespace."""
    port = re.search(r"health on 127\.0\.0\.1:(\d+)", daemon.text())
    assert port, "the daemon did not announce its health endpoint"
    script = (
        "import sys,urllib.request;"
        f"sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:{port.group(1)}/metrics',"
        "timeout=10).read().decode())"
    )
    return subprocess.run(
        ["ip", "netns", "exec", remote.client_netns, sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout


def metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or line.startswith(f"{name}{{{want},"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name}{{{want}}} in /metrics")


# -- Secrets and the LibvirtHost -------------------------------------------------------------


def put_secret(
    api: client.ApiClient, name: str, data: dict[str, bytes], *, ns: str = SYSTEM_NAMESPACE
) -> None:
    core = client.CoreV1Api(api)
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, namespace=ns),
        data={k: base64.b64encode(v).decode() for k, v in data.items()},
    )
    try:
        core.create_namespaced_secret(ns, body)
    except ApiException as err:
        if err.status != 409:
            raise
        core.replace_namespaced_secret(name, ns, body)


def delete_secret(api: client.ApiClient, name: str, *, ns: str = SYSTEM_NAMESPACE) -> None:
    try:
        client.CoreV1Api(api).delete_namespaced_secret(name, ns)
    except ApiException as err:
        if err.status != 404:
            raise


def ssh_data(remote: LabRemote, *, key: Path | None = None) -> dict[str, bytes]:
    return {
        "ssh-privatekey": (key or remote.ssh_key).read_bytes(),
        "known_hosts": remote.known_hosts.read_bytes(),
    }


def tls_data(remote: LabRemote) -> dict[str, bytes]:
    return {
        "ca.crt": remote.ca_crt.read_bytes(),
        "tls.crt": remote.tls_crt.read_bytes(),
        "tls.key": remote.tls_key.read_bytes(),
    }


def set_host(
    api: client.ApiClient, remote: LabRemote, connection: dict[str, Any] | None, **spec: Any
) -> None:
    """The remote host's LibvirtHost with this connection (and spec), created or replaced."""
    custom = client.CustomObjectsApi(api)
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{V}",
        "kind": c.HOST_KIND,
        "metadata": {"name": remote.name},
        "spec": {**({"connection": connection} if connection else {}), **spec},
    }
    try:
        current = custom.get_cluster_custom_object(GROUP, V, HOSTS, remote.name)
    except ApiException as err:
        if err.status != 404:
            raise
        custom.create_cluster_custom_object(GROUP, V, HOSTS, body)
        return
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    custom.replace_cluster_custom_object(GROUP, V, HOSTS, remote.name, body)


def host(api: client.ApiClient, name: str) -> dict[str, Any]:
    found: dict[str, Any] = client.CustomObjectsApi(api).get_cluster_custom_object(
        GROUP, V, HOSTS, name
    )
    return found


def wait_connected(
    api: client.ApiClient, remote: LabRemote, reason: str, *, timeout: float = 90
) -> dict[str, Any]:
    """The host's Connected condition once its reason is `reason`."""
    found: dict[str, Any] = eventually(
        lambda: (
            (cond := condition(host(api, remote.name), c.HOST_CONDITION_CONNECTED)).get("reason")
            == reason
            and cond
        ),
        timeout=timeout,
        interval=0.5,
        what=f"LibvirtHost {remote.name} Connected={reason}",
    )
    return found


def lease_holder(api: client.ApiClient, host: str) -> str:
    """Who holds the remote host's Lease (its claim); "" when nobody does."""
    lease = client.CoordinationV1Api(api).read_namespaced_lease(
        f"{c.HEARTBEAT_LEASE_PREFIX}{host}", SYSTEM_NAMESPACE
    )
    return str(lease.spec.holder_identity or "")


def host_events(api: client.ApiClient, name: str) -> list[Any]:
    events = client.CoreV1Api(api).list_event_for_all_namespaces(
        field_selector=f"involvedObject.name={name},involvedObject.kind={c.HOST_KIND}"
    )
    return list(events.items)


def remote_pair(ns: str, name: str, remote: LabRemote, **vm_spec: Any) -> list[dict[str, Any]]:
    """A linked pair pinned to the remote host."""
    vm, lm = pair(ns, name, vm_spec=vm_spec or None)
    lm["metadata"].setdefault("labels", {})[c.HOST_LABEL] = remote.name
    lm["spec"]["host"] = remote.name
    return [vm, lm]


@pytest.fixture(scope="module")
def remote_api(lab: LabInfo, api_client: client.ApiClient, remote: LabRemote) -> client.ApiClient:
    install_api(lab, api_client)
    return api_client


def host_domains(remote: LabRemote) -> list[str]:
    conn = libvirt.open(remote.uri)
    try:
        return [d.name() for d in conn.listAllDomains(0)]
    finally:
        conn.close()


def host_volumes(remote: LabRemote, prefix: str) -> list[str]:
    conn = libvirt.open(remote.uri)
    try:
        pool = conn.storagePoolLookupByName(remote.pool)
        pool.refresh(0)
        return [v.name() for v in pool.listAllVolumes(0) if v.name().startswith(prefix)]
    finally:
        conn.close()


def forget_host(api: client.ApiClient, remote: LabRemote) -> None:
    """Delete the remote host's LibvirtHost (no machine may be left on it)."""
    try:
        client.CustomObjectsApi(api).delete_cluster_custom_object(GROUP, V, HOSTS, remote.name)
    except ApiException as err:
        if err.status != 404:
            raise
