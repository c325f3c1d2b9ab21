"""What the provider's shells send and what their failures mean, against a stub API server.

The Secret reads (a machine's bootstrap data, a remote host's credentials), the host's heartbeat
Lease and its LibvirtHost: requests spelled out, and each error answer mapped onto the provider's
own errors as before the client underneath changed.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import pytest
from kubernetes import client

from libvirt_provider import constants as c
from libvirt_provider.adapters.host.agent import HostAgent
from libvirt_provider.adapters.host.controller import configure_settings
from libvirt_provider.adapters.host.credentials import HostCredentials
from libvirt_provider.adapters.kube.adapter import KubeAdapter
from libvirt_provider.driver.endpoint import ConnectionProblemError
from libvirt_provider.errors import AccessDeniedError, PermanentError, RetryableError
from libvirt_provider.host_api import HostConnection, SecretReference
from tests.support.apiserver import StubApiServer

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)$")
SECRETS = "/api/v1/namespaces/ns/secrets"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/sys/leases"
HOSTS = f"/apis/{c.GROUP}/{c.VERSION}/{c.HOST_PLURAL}"


def shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, str) and TIME.match(value):
        return "<time>"
    return value


def sent(server: StubApiServer) -> list[tuple[str, str, str | None, Any]]:
    return [(r.method, r.path, r.content_type, shape(r.body)) for r in server.requests]


@pytest.fixture
def server() -> Iterator[StubApiServer]:
    with StubApiServer(watch_hold=0.2) as stub:
        yield stub


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# -- a machine's Secrets -------------------------------------------------------------------------


def test_secret_data_is_read_encoded_and_refusals_have_their_meaning(
    server: StubApiServer,
) -> None:
    server.put(f"{SECRETS}/boot", {"data": {"userdata": b64("#cloud-config\n")}})
    adapter = KubeAdapter(server.api_client(), host="h1")

    read = adapter.get_secret_data("ns", "boot")
    assert read is not None
    assert read.data == {"userdata": b64("#cloud-config\n")}
    # The version the cache keys on.
    assert read.version == server.get(f"{SECRETS}/boot")["metadata"]["resourceVersion"]  # type: ignore[index]
    assert adapter.get_secret_data("ns", "absent") is None
    server.fail("GET", f"{SECRETS}/boot", 403)
    with pytest.raises(AccessDeniedError, match="reading Secret 'boot' in namespace 'ns' is"):
        adapter.get_secret_data("ns", "boot")
    server.fail("GET", f"{SECRETS}/boot", 422)
    with pytest.raises(PermanentError) as refused:
        adapter.get_secret_data("ns", "boot")
    assert type(refused.value) is PermanentError
    server.fail("GET", f"{SECRETS}/boot", 503)
    with pytest.raises(RetryableError, match="HTTP 503"):
        adapter.get_secret_data("ns", "boot")
    assert {(r.method, r.path, r.accept) for r in server.requests} == {
        ("GET", f"{SECRETS}/boot", "application/json"),
        ("GET", f"{SECRETS}/absent", "application/json"),
    }


def test_an_empty_secret_has_no_data(server: StubApiServer) -> None:
    server.put(f"{SECRETS}/empty", {"type": "Opaque"})
    read = KubeAdapter(server.api_client(), host="h1").get_secret_data("ns", "empty")
    assert read is not None
    assert read.data == {}


# -- a remote host's credentials -----------------------------------------------------------------


def credentials(server: StubApiServer, tmp_path: Path) -> HostCredentials:
    found = HostCredentials(server.api_client(), host="r1", namespace="ns", root=tmp_path)
    found.set_connection(
        HostConnection(
            uri="qemu+tls://r1.example/system", secret_ref=SecretReference(name="r1-creds")
        )
    )
    return found


def test_credentials_read_the_secrets_version_and_decoded_data(
    server: StubApiServer, tmp_path: Path
) -> None:
    stored = server.put(
        f"{SECRETS}/r1-creds", {"data": {"ca.crt": b64("CA"), "broken": "%%%", "empty": ""}}
    )
    creds = credentials(server, tmp_path)
    assert creds.secret_version() == stored["metadata"]["resourceVersion"]
    version, data = creds._read_secret("r1-creds")
    assert version == stored["metadata"]["resourceVersion"]
    assert data == {"ca.crt": b"CA", "broken": b"", "empty": b""}


@pytest.mark.parametrize(
    ("status", "reason", "detail"),
    [
        (404, c.REASON_SECRET_NOT_FOUND, "Secret ns/r1-creds does not exist"),
        (403, c.REASON_SECRET_NOT_FOUND, "Secret ns/r1-creds may not be read by the daemon"),
        (500, c.REASON_UNREACHABLE, "reading Secret ns/r1-creds: 500"),
    ],
)
def test_credentials_refused_or_missing_say_why(
    server: StubApiServer, tmp_path: Path, status: int, reason: str, detail: str
) -> None:
    server.put(f"{SECRETS}/r1-creds", {"data": {}})
    creds = credentials(server, tmp_path)
    server.fail("GET", f"{SECRETS}/r1-creds", status)
    with pytest.raises(ConnectionProblemError) as problem:
        creds._read_secret("r1-creds")
    assert problem.value.reason == reason
    assert detail in str(problem.value)


def test_credentials_unreachable_name_only_the_error_type(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on: the connection is refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    configuration = client.Configuration(host=f"http://127.0.0.1:{port}")
    configuration.retries = 0
    api = client.ApiClient(configuration)
    creds = HostCredentials(api, host="r1", namespace="ns", root=tmp_path)
    with pytest.raises(ConnectionProblemError) as problem:
        creds._read_secret("r1-creds")
    assert problem.value.reason == c.REASON_UNREACHABLE
    assert re.fullmatch(r"reading Secret ns/r1-creds: [A-Za-z]+Error", problem.value.message)


# -- the host agent: heartbeat Lease and LibvirtHost ---------------------------------------------


def agent(server: StubApiServer, *, hop_address: str | None = None) -> HostAgent:
    return HostAgent(
        server.api_client(),
        hypervisor=None,  # type: ignore[arg-type]  # not asked here
        host="h1",
        lease_namespace="sys",
        allocations=lambda: (None, 0),  # type: ignore[arg-type, return-value]
        hop_address=hop_address,
    )


def test_the_heartbeat_creates_its_lease_once_then_patches_it(server: StubApiServer) -> None:
    beating = agent(server)
    beating._beat()
    beating._beat()
    lease = f"{LEASES}/{c.HEARTBEAT_LEASE_PREFIX}h1"
    spec = {
        "holderIdentity": "h1",
        "leaseDurationSeconds": int(c.HEARTBEAT_GRACE_SECONDS),
        "renewTime": "<time>",
    }
    strategic = "application/strategic-merge-patch+json"
    created = {
        "metadata": {
            "name": f"{c.HEARTBEAT_LEASE_PREFIX}h1",
            "labels": {c.HOST_LABEL: "h1"},
            "namespace": "sys",
        },
        "spec": {**spec, "acquireTime": "<time>"},
    }
    version = server.get(lease)["metadata"]["resourceVersion"]  # type: ignore[index]
    assert sent(server) == [
        ("GET", lease, None, None),
        ("POST", LEASES, None, created),
        ("GET", lease, None, None),
        # The version read: a claim taken in between makes this write conflict, not win.
        ("PATCH", lease, strategic, {"metadata": {"resourceVersion": str(int(version) - 1)},
                                     "spec": spec}),
    ]  # fmt: skip
    # MicroTime: microseconds, as the client library writes a datetime.
    assert re.search(r"\.\d{6}", server.requests[1].body["spec"]["renewTime"])
    assert beating.lease_problem() is None


def _hop_annotation(server: StubApiServer) -> object:
    lease = server.get(f"{LEASES}/{c.HEARTBEAT_LEASE_PREFIX}h1") or {}
    return (lease["metadata"].get("annotations") or {}).get(c.HOP_ADDRESS_ANNOTATION)


def test_the_heartbeat_publishes_where_this_daemon_takes_hops(server: StubApiServer) -> None:
    """docs/console.md, "Routing": the address is in the Lease from its creation, and a patch
    carries it only when the Lease holds another (or none)."""
    beating = agent(server, hop_address="10.0.0.7:8444")
    beating._beat()
    assert server.requests[1].body["metadata"]["annotations"] == {
        c.HOP_ADDRESS_ANNOTATION: "10.0.0.7:8444"
    }
    assert _hop_annotation(server) == "10.0.0.7:8444"
    beating._beat()
    assert "annotations" not in server.requests[3].body["metadata"]
    # Restarted on another pod IP: the next beat rewrites it.
    agent(server, hop_address="10.0.0.9:8444")._beat()
    assert server.requests[5].body["metadata"]["annotations"] == {
        c.HOP_ADDRESS_ANNOTATION: "10.0.0.9:8444"
    }
    assert _hop_annotation(server) == "10.0.0.9:8444"


def test_a_daemon_without_hops_removes_an_address_left_in_the_lease(
    server: StubApiServer,
) -> None:
    agent(server, hop_address="10.0.0.7:8444")._beat()
    without = agent(server)
    without._beat()
    assert server.requests[3].body["metadata"]["annotations"] == {c.HOP_ADDRESS_ANNOTATION: None}
    assert _hop_annotation(server) is None
    without._beat()
    assert "annotations" not in server.requests[5].body["metadata"]


def test_a_heartbeat_refused_is_raised_to_the_loop(server: StubApiServer) -> None:
    server.fail("GET", f"{LEASES}/{c.HEARTBEAT_LEASE_PREFIX}h1", 403)
    with pytest.raises(Exception) as refused:  # noqa: PT011 (the client's own, logged by _run)
        agent(server)._beat()
    assert getattr(refused.value, "status", None) == 403
    assert len(server.requests) == 1


def _held_by(server: StubApiServer, holder: str, renewed: dt.datetime) -> str:
    path = f"{LEASES}/{c.HEARTBEAT_LEASE_PREFIX}h1"
    server.put(
        path,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": f"{c.HEARTBEAT_LEASE_PREFIX}h1", "namespace": "sys"},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": int(c.HEARTBEAT_GRACE_SECONDS),
                "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        },
    )
    return path


def test_a_fresh_lease_held_by_a_remote_claim_is_not_taken_over(
    server: StubApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    path = _held_by(server, "remote-replica-1", dt.datetime.now(dt.UTC))
    beating = agent(server)
    beating._beat()
    assert [r.method for r in server.requests] == ["GET"]
    assert server.get(path)["spec"]["holderIdentity"] == "remote-replica-1"  # type: ignore[index]
    problem = beating.lease_problem()
    assert problem is not None
    assert "held by remote-replica-1" in problem
    assert "does not take it over" in problem
    # Told once per holder in the log, not at every beat.
    assert [r.levelno for r in caplog.records if "take it over" in r.getMessage()] == [
        logging.ERROR
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO):
        beating._beat()
        beating._beat()
    assert not [r for r in caplog.records if "does not take it over" in r.getMessage()]


def test_a_daemon_refused_the_lease_leaves_the_hosts_object_to_its_holder(
    server: StubApiServer,
) -> None:
    _held_by(server, "remote-replica-1", dt.datetime.now(dt.UTC))
    beating = agent(server)
    beating._beat()
    beating.informer.wait_synced = lambda _timeout: True  # type: ignore[method-assign]
    beating._sync()  # would create the missing LibvirtHost, were the host this daemon's
    assert [r.method for r in server.requests] == ["GET"]


def test_a_stale_lease_of_another_holder_is_taken(server: StubApiServer) -> None:
    old = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=c.HEARTBEAT_GRACE_SECONDS + 5)
    path = _held_by(server, "remote-replica-1", old)
    beating = agent(server)
    beating._beat()
    assert server.get(path)["spec"]["holderIdentity"] == "h1"  # type: ignore[index]
    assert beating.lease_problem() is None


def test_a_claim_taken_between_read_and_renewal_makes_the_renewal_conflict(
    server: StubApiServer,
) -> None:
    path = _held_by(server, "h1", dt.datetime.now(dt.UTC))
    beating = agent(server)
    real_read = beating._leases.read_namespaced_lease

    def read_then_claimed(*args: Any, **kwargs: Any) -> Any:
        lease = real_read(*args, **kwargs)
        _held_by(server, "remote-replica-1", dt.datetime.now(dt.UTC))
        return lease

    beating._leases.read_namespaced_lease = read_then_claimed  # type: ignore[method-assign]
    with pytest.raises(Exception) as conflict:  # noqa: PT011 (the client's own, logged by _run)
        beating._beat()
    assert getattr(conflict.value, "status", None) == 409
    assert server.get(path)["spec"]["holderIdentity"] == "remote-replica-1"  # type: ignore[index]


def test_the_libvirthost_is_created_and_one_created_meanwhile_is_no_error(
    server: StubApiServer,
) -> None:
    creating = agent(server)
    creating._create()
    creating._create()  # 409: there already
    body = {"apiVersion": f"{c.GROUP}/{c.VERSION}", "kind": c.HOST_KIND,
            "metadata": {"name": "h1"}, "spec": {}}  # fmt: skip
    assert sent(server) == [("POST", HOSTS, None, body)] * 2
    server.fail("POST", HOSTS, 500)
    with pytest.raises(Exception) as failed:  # noqa: PT011 (the client's own, logged by _run)
        creating._create()
    assert getattr(failed.value, "status", None) == 500


# -- which machines a daemon reads ---------------------------------------------------------------


def test_a_daemon_reads_its_machines_by_spec_host_never_by_the_label(
    server: StubApiServer,
) -> None:
    assert KubeAdapter(server.api_client(), host="h1").access_problem() is None
    [listing] = server.requests
    assert "fieldSelector=spec.host%3Dh1" in listing.query
    assert "labelSelector" not in listing.query


def test_the_machine_watch_selects_by_spec_host() -> None:
    settings = kopf.OperatorSettings()
    configure_settings(settings, host="h1")
    machines = kopf.Resource(c.GROUP, c.VERSION, c.MACHINE_PLURAL)
    assert settings.watching.field_selectors.collect(machines) == ["spec.host=h1"]
    assert settings.watching.label_selectors.collect(machines) == []


class _CountingHypervisor:
    def __init__(self) -> None:
        self.reads = 0

    def host_inventory(self) -> object:
        self.reads += 1
        return object()


def test_libvirts_inventory_is_read_at_every_heartbeat_and_not_in_between(
    server: StubApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    hypervisor = _CountingHypervisor()
    reading = HostAgent(
        server.api_client(),
        hypervisor=hypervisor,  # type: ignore[arg-type]  # only host_inventory is asked
        host="h1",
        lease_namespace="sys",
        allocations=lambda: (None, 0),  # type: ignore[arg-type, return-value]
        interval=10.0,
    )
    now = [100.0]
    monkeypatch.setattr("libvirt_provider.adapters.host.agent.time.monotonic", lambda: now[0])
    reading._inventory()
    # A pass woken in between (a machine's allocation changed) reuses the read.
    now[0] += 3.0
    reading._inventory()
    assert hypervisor.reads == 1
    # The next heartbeat's pass starts 10 s after the last one began, so a little less than
    # 10 s after that read ended; it reads libvirt again.
    now[0] += 6.9
    reading._inventory()
    assert hypervisor.reads == 2
