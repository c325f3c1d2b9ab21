"""LibvirtHost objects as tests read and set them: placement's hosts (ready, patched, reset, where
a machine was placed) and the remote host (its connection, its Secrets, its Lease, its Events).

Why a module of its own: the placement tests, the remote-host tests and their benchmarks all reset
hosts to defaults and wait on host conditions; one copy keeps "defaults" and "Ready" the same.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from libvirt_provider.hosts.inventory import format_size, parse_size
from tests.support.kube import GROUP, SYSTEM_NAMESPACE, V, condition, get
from tests.support.lab_access import LabRemote
from tests.support.waiting import eventually

HOSTS_PLURAL = "libvirthosts"


# -- placement's hosts ----------------------------------------------------------------------------


def host_object(api: client.ApiClient, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = client.CustomObjectsApi(api).get_cluster_custom_object(
            GROUP, V, HOSTS_PLURAL, name
        )
        return found
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def host_ready(api: client.ApiClient, name: str) -> bool:
    obj = host_object(api, name) or {}
    status = obj.get("status") or {}
    ready = [x for x in status.get("conditions") or [] if x.get("type") == "Ready"]
    return bool(ready and ready[0].get("status") == "True" and status.get("allocatable"))


def patch_host(api: client.ApiClient, name: str, body: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_cluster_custom_object(GROUP, V, HOSTS_PLURAL, name, body)


# The lab's hosts are 2-CPU machines running tiny guests by the dozen: their LibvirtHosts admit 16
# vCPUs per CPU (the default 4 would admit 8 one-vCPU guests per host). The placement tests and
# the admission tests set their hosts' spec themselves.
LAB_HOST_SPEC: dict[str, Any] = {"overcommit": {"cpu": 16.0}}


def declare_host(api: client.ApiClient, name: str, spec: dict[str, Any]) -> None:
    """The LibvirtHost `name` with `spec` merged into it, created when it does not exist (its
    daemon then finds it and fills in its status)."""
    custom = client.CustomObjectsApi(api)
    try:
        custom.patch_cluster_custom_object(GROUP, V, HOSTS_PLURAL, name, {"spec": spec})
        return
    except ApiException as err:
        if err.status != 404:
            raise
    body = {
        "apiVersion": f"{GROUP}/{V}",
        "kind": c.HOST_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }
    try:
        custom.create_cluster_custom_object(GROUP, V, HOSTS_PLURAL, body)
    except ApiException as err:
        if err.status != 409:  # its daemon created it meanwhile
            raise
        custom.patch_cluster_custom_object(GROUP, V, HOSTS_PLURAL, name, {"spec": spec})


def leave_100mi(api: client.ApiClient, host: str) -> None:
    """Everything but 100Mi reserved on `host`: no 256Mi machine fits there."""
    memory = host_object(api, host)["status"]["capacity"]["memory"]  # type: ignore[index]
    reserve = format_size(parse_size(memory) - 100 * 2**20)
    patch_host(api, host, {"spec": {"reserved": {"memory": reserve}}})
    eventually(
        lambda: (host_object(api, host) or {})["status"]["allocatable"]["memory"] == "100Mi",
        timeout=30,
        what=f"{host}'s allocatable memory down to 100Mi",
    )


def reset_host(api: client.ApiClient, name: str) -> None:
    """Back to defaults: no drain, schedulable, default overcommit, nothing reserved, no zone
    label."""
    obj = host_object(api, name)
    if obj is None:
        return
    labels = {k: None for k in (obj["metadata"].get("labels") or {})}
    defaults = {
        "drain": None,
        "unschedulable": False,
        "overcommit": {"cpu": 4.0, "memory": 1.0},
        "reserved": {"cpus": 0, "memory": "0"},
    }
    patch_host(api, name, {"metadata": {"labels": labels or None}, "spec": defaults})


def placed_on(api: client.ApiClient, ns: str, name: str, *, timeout: float = 60) -> str:
    """The host placement chose for LibvirtMachine `ns/name`, once it chose."""
    found: str = eventually(
        lambda: ((get(api, ns, name, vm=False) or {}).get("spec") or {}).get("host"),
        timeout=timeout,
        what=f"{ns}/{name} placed",
    )
    return found


# -- the remote host ------------------------------------------------------------------------------


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
        "spec": {
            **LAB_HOST_SPEC,
            **({"connection": connection} if connection else {}),
            **spec,
        },
    }
    try:
        current = custom.get_cluster_custom_object(GROUP, V, HOSTS_PLURAL, remote.name)
    except ApiException as err:
        if err.status != 404:
            raise
        custom.create_cluster_custom_object(GROUP, V, HOSTS_PLURAL, body)
        return
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    custom.replace_cluster_custom_object(GROUP, V, HOSTS_PLURAL, remote.name, body)


def host(api: client.ApiClient, name: str) -> dict[str, Any]:
    found: dict[str, Any] = client.CustomObjectsApi(api).get_cluster_custom_object(
        GROUP, V, HOSTS_PLURAL, name
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


def forget_host(api: client.ApiClient, remote: LabRemote) -> None:
    """Delete the remote host's LibvirtHost (no machine may be left on it)."""
    try:
        client.CustomObjectsApi(api).delete_cluster_custom_object(
            GROUP, V, HOSTS_PLURAL, remote.name
        )
    except ApiException as err:
        if err.status != 404:
            raise
