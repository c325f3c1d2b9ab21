"""A node daemon's credentials reach its own host only (deploy/node-restriction.yaml), and the
remote ServiceAccount holds only what remote mode uses (deploy/remote/rbac.yaml).

No daemon and no guest: a Node object and a Pod bound to it (no kubelet: the Pod stays Pending)
give a token of the node daemons' ServiceAccount bound to that Pod, which carries the node's name
as a DaemonSet pod's token does; the test writes with it directly, against machines and hosts
that no daemon serves.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from tests.support.factories import pair
from tests.support.kube import GROUP, V, apply, install_api, service_account_kubeconfig
from tests.support.lab_access import REPO, LabInfo
from tests.support.migrations import migration
from tests.support.snapshots import SNAPSHOTS, create_snapshot
from tests.support.waiting import eventually

SYSTEM = "vm-api-system"
ELECTION = "vm-api-generic-controller"


def _dry_run_refused(call: Callable[[], Any]) -> bool:
    try:
        call()
    except ApiException as err:
        if err.status == 403:
            return True
        raise
    return False


def _refused(call: Callable[[], Any]) -> str:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 403, err.value.body
    return str(err.value.body)


@pytest.fixture(scope="module")
def installed(lab: LabInfo, api_client: client.ApiClient) -> None:
    """The CRDs, and deploy/'s RBAC and node restriction, once for the module."""
    install_api(lab, api_client)
    apply(
        lab,
        REPO / "deploy" / "namespace.yaml",
        REPO / "deploy" / "rbac.yaml",
        REPO / "deploy" / "node-restriction.yaml",
        REPO / "deploy" / "remote" / "rbac.yaml",
    )


@pytest.fixture
def world(
    installed: None, lab: LabInfo, api_client: client.ApiClient, tmp_path: Path
) -> Iterator[dict[str, Any]]:
    """A node `mine` with a Pod of the daemons' ServiceAccount, a host `other`, a namespace, and
    a client with the Pod's token."""
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    suffix = uuid.uuid4().hex[:8]
    mine, other, ns = f"nr-mine-{suffix}", f"nr-other-{suffix}", f"nr-{suffix}"
    core.create_node({"metadata": {"name": mine}})
    core.create_namespace({"metadata": {"name": ns}})
    pod = core.create_namespaced_pod(
        SYSTEM,
        {
            "metadata": {"name": f"provider-{suffix}"},
            "spec": {
                "nodeName": mine,
                "serviceAccountName": "libvirt-provider",
                "containers": [{"name": "provider", "image": "vm-api/libvirt-provider:0.1.0"}],
            },
        },
    )
    for host in (mine, other):
        custom.create_cluster_custom_object(
            GROUP,
            V,
            c.HOST_PLURAL,
            {
                "apiVersion": f"{GROUP}/{V}",
                "kind": "LibvirtHost",
                "metadata": {"name": host},
                "spec": {},
            },
        )
    kubeconfig = tmp_path / "node.kubeconfig"
    service_account_kubeconfig(lab, api_client, kubeconfig, bound_pod=pod)
    as_node = config.new_client_from_config(str(kubeconfig))
    # A policy just created, and a Lease its binding reads as a parameter, reach admission a
    # moment after they are written: the test waits for each through a dry run, which admission
    # judges like the real request but which changes nothing.
    eventually(
        lambda: _dry_run_refused(
            lambda: client.CustomObjectsApi(as_node).patch_cluster_custom_object_status(
                GROUP, V, c.HOST_PLURAL, other, {"status": {"conditions": []}}, dry_run="All"
            )
        ),
        timeout=30,
        what="the node restriction enforced",
    )
    coordination = client.CoordinationV1Api(api_client)
    election_before = _lease_or_none(coordination, ELECTION)
    yield {"mine": mine, "other": other, "ns": ns, "as_node": as_node}
    # The election Lease as it was (a daemon of another test may campaign for it).
    if election_before is None:
        _ignore_missing(lambda: coordination.delete_namespaced_lease(ELECTION, SYSTEM))
    else:
        coordination.patch_namespaced_lease(
            ELECTION, SYSTEM, {"spec": {"holderIdentity": election_before.spec.holder_identity}}
        )
    for lease in (f"libvirt-host-{mine}", f"libvirt-host-{other}"):
        _ignore_missing(lambda lease=lease: coordination.delete_namespaced_lease(lease, SYSTEM))
    core.delete_namespaced_pod(pod.metadata.name, SYSTEM, grace_period_seconds=0)
    for host in (mine, other):
        custom.delete_cluster_custom_object(GROUP, V, c.HOST_PLURAL, host)
    core.delete_namespace(ns)
    core.delete_node(mine)


def _lease_or_none(leases: client.CoordinationV1Api, name: str) -> Any:
    try:
        return leases.read_namespaced_lease(name, SYSTEM)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _elect(api_client: client.ApiClient, holder: str) -> None:
    """The election Lease held by `holder`, as an admin writes it."""
    leases = client.CoordinationV1Api(api_client)
    if _lease_or_none(leases, ELECTION) is None:
        body = {"metadata": {"name": ELECTION}, "spec": {"holderIdentity": holder}}
        leases.create_namespaced_lease(SYSTEM, body)
    else:
        leases.patch_namespaced_lease(ELECTION, SYSTEM, {"spec": {"holderIdentity": holder}})


def _ignore_missing(call: Callable[[], Any]) -> None:
    try:
        call()
    except ApiException as err:
        if err.status != 404:
            raise


def _machine(
    api: client.ApiClient, ns: str, name: str, *, host: str | None, label: str | None
) -> Any:
    body = pair(ns, name)[1]
    labels = body["metadata"].setdefault("labels", {})
    labels.pop(c.HOST_LABEL, None)
    if label:
        labels[c.HOST_LABEL] = label
    body["spec"].pop("host", None)
    if host:
        body["spec"]["host"] = host
    return client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, V, ns, c.MACHINE_PLURAL, body
    )


def test_a_node_daemons_token_writes_its_own_host_only(
    api_client: client.ApiClient, world: dict[str, Any]
) -> None:
    mine, other = world["mine"], world["other"]
    node = client.CustomObjectsApi(world["as_node"])
    leases = client.CoordinationV1Api(world["as_node"])
    status = {"status": {"conditions": []}}

    # Hosts: its own status, not another's; no LibvirtHost under another name.
    node.patch_cluster_custom_object_status(GROUP, V, c.HOST_PLURAL, mine, status)
    body = _refused(
        lambda: node.patch_cluster_custom_object_status(GROUP, V, c.HOST_PLURAL, other, status)
    )
    assert "may write only its own LibvirtHost" in body
    _refused(
        lambda: node.create_cluster_custom_object(
            GROUP,
            V,
            c.HOST_PLURAL,
            {
                "apiVersion": f"{GROUP}/{V}",
                "kind": "LibvirtHost",
                "metadata": {"name": f"{other}-forged"},
                "spec": {},
            },
        )
    )

    # Heartbeat Leases: its own, not another host's.
    def lease(name: str, holder: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"holderIdentity": holder}}

    leases.create_namespaced_lease(SYSTEM, lease(f"libvirt-host-{mine}", mine))
    _refused(lambda: leases.create_namespaced_lease(SYSTEM, lease(f"libvirt-host-{other}", other)))
    client.CoordinationV1Api(api_client).create_namespaced_lease(
        SYSTEM, lease(f"libvirt-host-{other}", other)
    )
    _refused(
        lambda: leases.patch_namespaced_lease(
            f"libvirt-host-{other}", SYSTEM, {"spec": {"holderIdentity": mine}}
        )
    )
    _refused(lambda: leases.delete_namespaced_lease(f"libvirt-host-{mine}", SYSTEM))

    # The election Lease: held by another node, not to be taken in another's name.
    _elect(api_client, f"{other}-7")
    _refused(
        lambda: leases.patch_namespaced_lease(
            ELECTION, SYSTEM, {"spec": {"holderIdentity": f"{other}-8"}}
        )
    )


def test_a_node_daemons_token_changes_its_own_hosts_machines_only(
    api_client: client.ApiClient, world: dict[str, Any]
) -> None:
    mine, other, ns = world["mine"], world["other"], world["ns"]
    node = client.CustomObjectsApi(world["as_node"])
    leases = client.CoordinationV1Api(world["as_node"])
    _elect(api_client, f"{other}-7")

    # Machines: one bound to another host (spec.host and label), one pinned there by label only,
    # one on this host, one unbound.
    theirs = _machine(api_client, ns, "theirs", host=other, label=other)
    pinned = _machine(api_client, ns, "pinned", host=None, label=other)
    _machine(api_client, ns, "own", host=mine, label=mine)
    _machine(api_client, ns, "free", host=None, label=None)

    def patch(name: str, body: dict[str, Any]) -> Any:
        return node.patch_namespaced_custom_object(GROUP, V, ns, c.MACHINE_PLURAL, name, body)

    relabel = {"metadata": {"labels": {c.HOST_LABEL: mine}}}
    body = _refused(lambda: patch("theirs", relabel))
    assert f"bound to {other}" in body
    _refused(lambda: patch("pinned", relabel))
    _refused(lambda: patch("pinned", {"spec": {"host": mine}}))  # re-pin
    _refused(lambda: patch("pinned", {"spec": {"host": other, "autostart": True}}))
    _refused(lambda: patch("theirs", {"metadata": {"finalizers": ["x.io/held"]}}))
    _refused(
        lambda: node.patch_namespaced_custom_object_status(
            GROUP, V, ns, c.MACHINE_PLURAL, "theirs", {"status": {"conditions": []}}
        )
    )
    # An owner that exists: with one that does not, the garbage collector would delete the
    # machine, which is why adoption is the leader's only.
    holder = client.CoreV1Api(api_client).create_namespaced_config_map(
        ns, {"metadata": {"name": "owner"}}
    )
    owner = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": holder.metadata.uid,
    }
    adopt = {"metadata": {"ownerReferences": [owner]}}

    def adoption_refused() -> bool:
        return _dry_run_refused(
            lambda: node.patch_namespaced_custom_object(
                GROUP, V, ns, c.MACHINE_PLURAL, "theirs", adopt, dry_run="All"
            )
        )

    eventually(adoption_refused, timeout=30, what="the election Lease seen by admission")
    _refused(lambda: patch("theirs", adopt))
    body = _refused(
        lambda: node.delete_namespaced_custom_object(GROUP, V, ns, c.MACHINE_PLURAL, "theirs")
    )
    assert "does not hold the election Lease" in body

    # Its own machine: status, finalizer, spec.host recorded; an unbound one may be bound.
    node.patch_namespaced_custom_object_status(
        GROUP, V, ns, c.MACHINE_PLURAL, "own", {"status": {"conditions": []}}
    )
    patch("own", {"metadata": {"finalizers": ["x.io/held"]}})
    patch("own", {"metadata": {"finalizers": None}})
    patch("free", {"metadata": {"labels": {c.HOST_LABEL: mine}}, "spec": {"host": mine}})
    node.delete_namespaced_custom_object(GROUP, V, ns, c.MACHINE_PLURAL, "own")

    # Leader: once this node holds the election Lease (in its own name), it may adopt and
    # delete another host's machine, as the generic controller does; still not re-pin it.
    leases.patch_namespaced_lease(ELECTION, SYSTEM, {"spec": {"holderIdentity": f"{mine}-42"}})
    eventually(lambda: not adoption_refused(), timeout=30, what="the new holder seen by admission")
    _refused(lambda: patch("pinned", {"spec": {"host": mine}}))
    patch("theirs", adopt)
    node.delete_namespaced_custom_object(GROUP, V, ns, c.MACHINE_PLURAL, "theirs")
    assert theirs["spec"]["host"] == other
    assert pinned["metadata"]["labels"][c.HOST_LABEL] == other
    # The placer (any node's, leader or not) records spec.host from a label-only pin.
    assert patch("pinned", {"spec": {"host": other}})["spec"]["host"] == other

    # A migration's hand-over: its own machine moved to the target the machine's lock names
    # (status.migration, which only the daemons write), and only there.
    _machine(api_client, ns, "moving", host=mine, label=mine)
    move = {"metadata": {"labels": {c.HOST_LABEL: other}}, "spec": {"host": other}}
    with pytest.raises(ApiException) as unlocked:
        patch("moving", move)
    assert unlocked.value.status == 422, unlocked.value.body  # no lock: the CRD's rule
    node.patch_namespaced_custom_object_status(
        GROUP,
        V,
        ns,
        c.MACHINE_PLURAL,
        "moving",
        {"status": {"migration": {"name": "m", "target": other}}},
    )
    _refused(lambda: patch("moving", {**move, "spec": {"host": other, "autostart": True}}))
    assert patch("moving", move)["spec"]["host"] == other


def test_a_node_daemons_token_writes_only_snapshots_unclaimed_or_taken_on_its_host(
    api_client: client.ApiClient, world: dict[str, Any]
) -> None:
    mine, other, ns = world["mine"], world["other"], world["ns"]
    node = client.CustomObjectsApi(world["as_node"])
    for name, host in (("theirs", other), ("own", mine), ("unclaimed", None)):
        create_snapshot(api_client, ns, name, "vm")
        if host:
            client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
                GROUP, V, ns, SNAPSHOTS, name, {"status": {"host": host}}
            )

    def status(name: str, body: dict[str, Any]) -> Any:
        return node.patch_namespaced_custom_object_status(GROUP, V, ns, SNAPSHOTS, name, body)

    def finalizers(name: str, value: list[str] | None) -> Any:
        body = {"metadata": {"finalizers": value}}
        return node.patch_namespaced_custom_object(GROUP, V, ns, SNAPSHOTS, name, body)

    def refused_on_theirs() -> bool:
        return _dry_run_refused(
            lambda: node.patch_namespaced_custom_object_status(
                GROUP, V, ns, SNAPSHOTS, "theirs", {"status": {"readyToUse": True}}, dry_run="All"
            )
        )

    eventually(refused_on_theirs, timeout=30, what="the snapshot restriction enforced")
    body = _refused(lambda: status("theirs", {"status": {"readyToUse": True}}))
    assert f"theirs is on {other}" in body
    _refused(lambda: finalizers("theirs", [c.SNAPSHOT_FINALIZER]))
    # Claiming another host's snapshot, or handing its own to another host: refused too.
    _refused(lambda: status("theirs", {"status": {"host": mine}}))
    _refused(lambda: status("own", {"status": {"host": other}}))
    # Its own, and an unclaimed one (any daemon reports a missing VM, and claims by taking it).
    status("own", {"status": {"readyToUse": True}})
    finalizers("own", [c.SNAPSHOT_FINALIZER])
    finalizers("own", None)
    status("unclaimed", {"status": {"conditions": []}})
    assert status("unclaimed", {"status": {"host": mine}})["status"]["host"] == mine

    # Restores, by the same rule.
    admin = client.CustomObjectsApi(api_client)
    for name, host in (("theirs", other), ("own", mine)):
        restore = {
            "apiVersion": f"{GROUP}/{V}",
            "kind": c.RESTORE_KIND,
            "metadata": {"name": name, "namespace": ns},
            "spec": {"snapshotName": name, "virtualMachineName": "vm"},
        }
        admin.create_namespaced_custom_object(GROUP, V, ns, c.RESTORE_PLURAL, restore)
        admin.patch_namespaced_custom_object_status(
            GROUP, V, ns, c.RESTORE_PLURAL, name, {"status": {"host": host}}
        )
    body = _refused(
        lambda: node.patch_namespaced_custom_object_status(
            GROUP, V, ns, c.RESTORE_PLURAL, "theirs", {"status": {"phase": "Failed"}}
        )
    )
    assert f"theirs is on {other}" in body
    node.patch_namespaced_custom_object_status(
        GROUP, V, ns, c.RESTORE_PLURAL, "own", {"status": {"phase": "Failed"}}
    )


def test_a_node_daemons_token_writes_only_migrations_from_or_to_its_host(
    api_client: client.ApiClient, world: dict[str, Any]
) -> None:
    mine, other, ns = world["mine"], world["other"], world["ns"]
    third = "nr-third-" + uuid.uuid4().hex[:6]
    admin = client.CustomObjectsApi(api_client)
    node = client.CustomObjectsApi(world["as_node"])
    placed = {"theirs": (other, third), "outgoing": (mine, other), "incoming": (other, mine)}
    for name in (*placed, "unclaimed"):
        admin.create_namespaced_custom_object(
            GROUP, V, ns, c.MIGRATION_PLURAL, migration(ns, name, "vm", None)
        )
        if name in placed:
            source, target = placed[name]
            admin.patch_namespaced_custom_object_status(
                GROUP, V, ns, c.MIGRATION_PLURAL, name,
                {"status": {"source": source, "target": target}},
            )  # fmt: skip

    def status(name: str, body: dict[str, Any], **kw: Any) -> Any:
        return node.patch_namespaced_custom_object_status(
            GROUP, V, ns, c.MIGRATION_PLURAL, name, body, **kw
        )

    eventually(
        lambda: _dry_run_refused(
            lambda: status("theirs", {"status": {"phase": "Failed"}}, dry_run="All")
        ),
        timeout=30,
        what="the migration restriction enforced",
    )
    body = _refused(lambda: status("theirs", {"status": {"phase": "Failed"}}))
    assert f"theirs moves a machine from {other} to {third}" in body
    _refused(
        lambda: node.patch_namespaced_custom_object(
            GROUP, V, ns, c.MIGRATION_PLURAL, "theirs",
            {"metadata": {"finalizers": [c.MIGRATION_FINALIZER]}},
        )
    )  # fmt: skip
    # Its own as source or target, but neither may rewrite who the source is; only the source
    # chooses another target.
    status("outgoing", {"status": {"phase": "Preparing", "target": third}})
    status("incoming", {"status": {"preparedVolumes": []}})
    _refused(lambda: status("incoming", {"status": {"target": third}}))
    _refused(lambda: status("outgoing", {"status": {"source": other}}))
    # One no source has claimed: any node fails it, or claims it as its own source only.
    status("unclaimed", {"status": {"phase": "Failed"}})
    body = _refused(lambda: status("unclaimed", {"status": {"source": other}}))
    assert "only as its own source" in body
    assert status("unclaimed", {"status": {"source": mine}})["status"]["source"] == mine


def test_the_remote_service_account_cannot_delete_machines_nor_create_hosts(
    api_client: client.ApiClient, installed: None
) -> None:
    auth = client.AuthorizationV1Api(api_client)
    user = f"system:serviceaccount:{SYSTEM}:libvirt-provider-remote"

    def allowed(verb: str, resource: str, subresource: str = "", namespace: str = "") -> bool:
        attributes = {"group": GROUP, "resource": resource, "verb": verb}
        if subresource:
            attributes["subresource"] = subresource
        if namespace:
            attributes["namespace"] = namespace
        review = auth.create_subject_access_review(
            {
                "spec": {
                    "user": user,
                    "groups": ["system:serviceaccounts"],
                    "resourceAttributes": attributes,
                }
            }
        )
        return bool(review.status.allowed)

    # RBAC changes reach the authorizer's cache shortly after they are written.
    eventually(
        lambda: not allowed("delete", "libvirtmachines", namespace="default"),
        timeout=30,
        what="the remote account refused machine deletion",
    )
    assert not allowed("create", "libvirthosts")
    assert allowed("patch", "libvirthosts", "status")
    assert allowed("patch", "libvirtmachines", "status", namespace="default")
