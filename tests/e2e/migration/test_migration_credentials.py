"""A source host's migration credentials come from its Secret (`--migration-secret`): a Secret
that lacks a key (the CA), or is gone, refuses the migration before anything is copied
(`MigrationCredentialsMissing`, the Secret and the key named, an Event), the machine runs on at
its source and the target holds nothing of it; the Secret fixed, the next migration moves it.
deploy/'s RBAC lets the daemons read that one Secret and no other.

Why: issue 27 item 3 ("host-to-host credentials from Secrets as for remote hosts"), on the real
lab: two daemons whose pkipath folders start empty (the fleet fixture), libvirt's TLS migration
between two extra hosts, one busybox guest shared by the module.

Cost: 26-47 s measured here (four runs: 47 s alone, the first after the lab came up; 31 s
within the directory's run; 26 s alone; 29 s alone with the RBAC check, which takes half a
second): one busybox guest booted (~10-20 s under TCG), two refusals of a few seconds each,
three moves of ~5 s each.
"""

from __future__ import annotations

import base64
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libvirt
import pytest
from kubernetes import client

from libvirt_provider import constants as c
from libvirt_provider.migration.credentials import version_folder
from tests.e2e.migration.credentials import (
    delete_migration_secret,
    migration_secret_data,
    migration_secret_name,
    put_migration_secret,
)
from tests.e2e.migration.moves import (
    create_migration,
    delete_migrations,
    migration,
    migration_events,
    pool_volumes,
    wait_ended,
)
from tests.support.daemons import Fleet
from tests.support.factories import pair
from tests.support.kube import SYSTEM_NAMESPACE, apply, create, domain_of, get, wait_ready
from tests.support.lab_access import REPO, LabHost, LabInfo
from tests.support.waiting import eventually

PKI_FILES = ("cacert.pem", "clientcert.pem", "clientkey.pem")


@dataclass(frozen=True)
class Guest:
    ns: str
    name: str
    uid: str


@pytest.fixture(scope="module")
def guest(fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str) -> Iterator[Guest]:
    """One running busybox machine, first on the lab's first host."""
    vm, lm = pair(ns, "creds")
    lm["metadata"]["labels"][c.HOST_LABEL] = lab.hosts[0].name
    lm["spec"]["host"] = lab.hosts[0].name
    create(api_client, [vm, lm])
    try:
        wait_ready(api_client, ns, "creds", what="the guest Ready on its first host")
        machine = get(api_client, ns, "creds", vm=False)
        assert machine is not None
        yield Guest(ns=ns, name="creds", uid=str(machine["metadata"]["uid"]))
    finally:
        delete_migrations(api_client, ns)
        for host in lab.hosts[:2]:
            put_migration_secret(api_client, host)


def _hosts(api: client.ApiClient, lab: LabInfo, guest: Guest) -> tuple[LabHost, LabHost]:
    """(where the guest is now, the other host): each test moves it from wherever it is."""
    machine = get(api, guest.ns, guest.name, vm=False)
    assert machine is not None
    here = machine["spec"]["host"]
    source = next(h for h in lab.hosts[:2] if h.name == here)
    target = next(h for h in lab.hosts[:2] if h.name != here)
    return source, target


def _pkipath(fleet: Fleet, host: LabHost) -> Path:
    flag = "--migration-pkipath="
    return Path(next(a for a in fleet.host_args(host) if a.startswith(flag))[len(flag) :])


def _written(api: client.ApiClient, fleet: Fleet, host: LabHost) -> Path:
    """The subfolder of the host's pkipath folder written from its Secret as it is now (one per
    resourceVersion: docs/migration.md, "What a host needs")."""
    secret = client.CoreV1Api(api).read_namespaced_secret(
        migration_secret_name(host), SYSTEM_NAMESPACE
    )
    return _pkipath(fleet, host) / version_folder(str(secret.metadata.resource_version))


def _condition(status: dict[str, Any]) -> dict[str, Any]:
    return next(x for x in status["conditions"] if x["type"] == c.MIGRATION_CONDITION_SUCCEEDED)


def _assert_refused_and_untouched(
    api: client.ApiClient,
    lab: LabInfo,
    guest: Guest,
    source: LabHost,
    target: LabHost,
    *,
    says: str,
) -> None:
    """A migration to `target` ends Failed with the reason, naming `says`; the machine runs on
    at `source`, the target holds nothing of it."""
    name = "creds-" + uuid.uuid4().hex[:6]
    create_migration(api, migration(guest.ns, name, guest.name, target.name))
    status = wait_ended(api, guest.ns, name, timeout=120)["status"]
    assert status["phase"] == c.MIGRATION_PHASE_FAILED, status
    cond = _condition(status)
    assert cond["reason"] == c.MIGRATION_REASON_CREDENTIALS_MISSING, cond
    assert says in cond["message"], cond
    assert f"keeps running on host {source.name}" in cond["message"], cond
    assert c.MIGRATION_REASON_CREDENTIALS_MISSING in migration_events(api, guest.ns, name)
    # Refused at the accept: nothing locked, prepared or copied.
    assert "preparedVolumes" not in status, status
    assert "progress" not in status, status
    machine = get(api, guest.ns, guest.name, vm=False)
    assert machine is not None
    assert machine["spec"]["host"] == source.name
    assert "migration" not in machine["status"], machine["status"]
    wait_ready(api, guest.ns, guest.name, what="the guest still Ready on its source", timeout=30)
    here = libvirt.open(source.uri)
    try:
        assert here.lookupByUUIDString(guest.uid).state()[0] == libvirt.VIR_DOMAIN_RUNNING
    finally:
        here.close()
    there = libvirt.open(target.uri)
    try:
        with pytest.raises(libvirt.libvirtError):
            there.lookupByUUIDString(guest.uid)
        assert pool_volumes(there, lab, domain_of(api, guest.ns, guest.name)) == []
    finally:
        there.close()


def _move(api: client.ApiClient, guest: Guest, target: LabHost) -> None:
    name = "creds-ok-" + uuid.uuid4().hex[:6]
    create_migration(api, migration(guest.ns, name, guest.name, target.name))
    status = wait_ended(api, guest.ns, name)["status"]
    assert status["phase"] == c.MIGRATION_PHASE_SUCCEEDED, status
    machine = get(api, guest.ns, guest.name, vm=False)
    assert machine is not None
    assert machine["spec"]["host"] == target.name


def _secret_values(host: LabHost) -> list[str]:
    """What must never be printed: the key's PEM body, and every value as base64."""
    data = migration_secret_data(host)
    key = base64.b64decode(data["tls.key"]).decode()
    body = "".join(line for line in key.splitlines() if not line.startswith("-----"))
    return [body[:40], data["tls.key"][:40]]


def test_a_secret_without_its_ca_refuses_the_move_and_the_fixed_secret_moves_it(
    fleet: Fleet, guest: Guest, lab: LabInfo, api_client: client.ApiClient
) -> None:
    source, target = _hosts(api_client, lab, guest)
    secret = migration_secret_name(source)
    # What `kubectl create secret tls` makes: the certificate and key without the CA (a
    # kubernetes.io/tls Secret must have the other two: the API server refuses it otherwise).
    broken = {k: v for k, v in migration_secret_data(source).items() if k != "ca.crt"}
    put_migration_secret(api_client, source, broken)
    _assert_refused_and_untouched(
        api_client,
        lab,
        guest,
        source,
        target,
        says=f"Secret {SYSTEM_NAMESPACE}/{secret} (--migration-secret) lacks ca.crt",
    )
    # Fixed: the next migration writes the files from it and moves the machine.
    put_migration_secret(api_client, source)
    _move(api_client, guest, target)
    folder = _written(api_client, fleet, source)
    data = migration_secret_data(source)
    for key, file in zip(("ca.crt", "tls.crt", "tls.key"), PKI_FILES, strict=True):
        assert (folder / file).read_bytes().strip() == base64.b64decode(data[key]).strip()
        assert stat.S_IMODE((folder / file).stat().st_mode) == 0o600
    log = fleet.daemons[source.name].log.read_text()
    assert "lacks ca.crt" in log
    for value in _secret_values(source):
        assert value not in log


def test_a_deleted_secret_refuses_the_move_and_its_key_is_not_kept(
    fleet: Fleet, guest: Guest, lab: LabInfo, api_client: client.ApiClient
) -> None:
    """There and back first, so that both hosts wrote their folders from their Secrets; then
    the Secret of the guest's host is deleted."""
    here, there = _hosts(api_client, lab, guest)
    _move(api_client, guest, there)
    _move(api_client, guest, here)
    written = _written(api_client, fleet, here)
    assert all((written / f).is_file() for f in PKI_FILES), list(written.iterdir())
    assert all((_written(api_client, fleet, there) / f).is_file() for f in PKI_FILES)
    folder = _pkipath(fleet, here)
    secret = migration_secret_name(here)
    delete_migration_secret(api_client, here)
    _assert_refused_and_untouched(
        api_client,
        lab,
        guest,
        here,
        there,
        says=f"Secret {SYSTEM_NAMESPACE}/{secret} does not exist (--migration-secret)",
    )
    # A revocation: the client key written from it is gone with it.
    assert list(folder.iterdir()) == [], list(folder.iterdir())
    for value in _secret_values(here):
        assert value not in fleet.daemons[here.name].log.read_text()


def test_the_deployed_rbac_lets_the_daemons_read_that_one_secret_only(
    lab: LabInfo, api_client: client.ApiClient
) -> None:
    """deploy/rbac.yaml against the API server that enforces it: `get` on the DaemonSet's
    --migration-secret in its namespace, nothing else of Secrets there (the refusal's own
    message, `may not be read by the daemon`, is unit-tested against a 403)."""
    apply(lab, REPO / "deploy" / "namespace.yaml", REPO / "deploy" / "rbac.yaml")
    account = "system:serviceaccount:vm-api-system:libvirt-provider"
    reviews = client.AuthorizationV1Api(api_client)

    def allowed(verb: str, name: str | None) -> bool:
        review = reviews.create_subject_access_review(
            client.V1SubjectAccessReview(
                spec=client.V1SubjectAccessReviewSpec(
                    user=account,
                    groups=["system:serviceaccounts", "system:serviceaccounts:vm-api-system"],
                    resource_attributes=client.V1ResourceAttributes(
                        namespace="vm-api-system", verb=verb, resource="secrets", name=name
                    ),
                )
            )
        )
        return bool(review.status.allowed)

    # The Role is read by the authorizer as soon as it is stored; wait for that, not a while.
    eventually(
        lambda: allowed("get", "libvirt-migration-tls"),
        timeout=30,
        what="the daemons' get on the migration Secret",
    )
    assert not allowed("get", "console-tls")
    assert not allowed("list", None)
    assert not allowed("watch", "libvirt-migration-tls")
    assert not allowed("update", "libvirt-migration-tls")
