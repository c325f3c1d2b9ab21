"""The migration Secrets this directory's daemons take their TLS client credentials from
(`--migration-secret`): one per lab host, made from the lab's client folder of that host
(docs/lab.md, "Migration links"), in the daemons' namespace."""

from __future__ import annotations

import base64
from pathlib import Path

from kubernetes import client

from tests.support.kube import SYSTEM_NAMESPACE
from tests.support.lab_access import LabHost

__all__ = [
    "SECRET_FILES",
    "delete_migration_secret",
    "migration_secret_data",
    "migration_secret_name",
    "put_migration_secret",
]

# The Secret's keys and the lab's client folder's files they hold (libvirt's pkipath names).
SECRET_FILES = {"ca.crt": "cacert.pem", "tls.crt": "clientcert.pem", "tls.key": "clientkey.pem"}


def migration_secret_name(host: LabHost) -> str:
    return f"migration-tls-{host.name}"


def migration_secret_data(host: LabHost) -> dict[str, str]:
    """The Secret's data (base64) from the lab's client folder of `host`."""
    assert host.migration_pkipath is not None
    folder = Path(host.migration_pkipath)
    return {
        key: base64.b64encode((folder / name).read_bytes()).decode()
        for key, name in SECRET_FILES.items()
    }


def put_migration_secret(
    api: client.ApiClient, host: LabHost, data: dict[str, str] | None = None
) -> None:
    """The host's migration Secret with `data` (default: the lab's credentials), made or
    replaced."""
    core = client.CoreV1Api(api)
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=migration_secret_name(host)),
        type="kubernetes.io/tls",
        data=migration_secret_data(host) if data is None else data,
    )
    try:
        core.replace_namespaced_secret(migration_secret_name(host), SYSTEM_NAMESPACE, body)
    except client.ApiException as err:
        if err.status != 404:
            raise
        core.create_namespaced_secret(SYSTEM_NAMESPACE, body)


def delete_migration_secret(api: client.ApiClient, host: LabHost) -> None:
    try:
        client.CoreV1Api(api).delete_namespaced_secret(
            migration_secret_name(host), SYSTEM_NAMESPACE
        )
    except client.ApiException as err:
        if err.status != 404:
            raise
