"""A pin is a filter, not a bypass: the host's daemon admits a pinned machine with placement's
filters, builds nothing it refuses and counts nothing it has not admitted; and the optional policy
deploy/policies/restrict-pins.yaml keeps tenants from pinning at all.

Machines are powered off: admission and building (volumes, a defined domain) are what is checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from libvirt_provider import constants as c
from tests.support.daemons import Fleet
from tests.support.factories import unplaced
from tests.support.hosts import host_object, leave_100mi, patch_host
from tests.support.kube import GROUP, V, apply, create, domain_of, kubectl, wait_reason
from tests.support.lab_access import REPO, LabInfo
from tests.support.virt import connections, hosts_defining
from tests.support.waiting import eventually

RBAC = "rbac.authorization.k8s.io"
POLICY = REPO / "deploy" / "policies" / "restrict-pins.yaml"


def allocated_machines(api: client.ApiClient, host: str) -> int:
    return int(host_object(api, host)["status"]["allocated"]["machines"])  # type: ignore[index]


def pinned(ns: str, name: str, host: str) -> list[dict[str, Any]]:
    return unplaced(ns, name, lm_spec={"host": host})


def not_admitted(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    return wait_reason(api, ns, name, c.REASON_NOT_ADMITTED, what=f"{ns}/{name} not admitted")


def test_a_machine_pinned_to_a_cordoned_host_is_refused_then_built_once_uncordoned(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    target = lab.hosts[0].name
    patch_host(api_client, target, {"spec": {"unschedulable": True}})
    before = allocated_machines(api_client, target)
    create(api_client, pinned(ns, "sneaky", target))
    cond = not_admitted(api_client, ns, "sneaky")
    assert cond["message"].startswith(
        f"host {target} does not admit this machine: the host is cordoned"
    ), cond
    said = [
        e.type
        for e in client.CoreV1Api(api_client).list_namespaced_event(ns).items
        if e.involved_object.kind == c.MACHINE_KIND and e.reason == c.REASON_NOT_ADMITTED
    ]
    assert said == ["Warning"], said
    domain = domain_of(api_client, ns, "sneaky")
    with connections(lab) as conns:
        assert hosts_defining(conns, domain) == []
        assert allocated_machines(api_client, target) == before
        # Uncordoning wakes the refused machine at once (no backoff to sit out).
        patch_host(api_client, target, {"spec": {"unschedulable": False}})
        eventually(
            lambda: hosts_defining(conns, domain) == [target],
            timeout=60,
            what="the pinned machine built once its host is uncordoned",
        )
    eventually(
        lambda: allocated_machines(api_client, target) == before + 1,
        timeout=30,
        what=f"{target} counting the machine it admitted",
    )


def test_a_machine_pinned_to_a_full_host_takes_nothing_and_placement_goes_on(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, ns: str
) -> None:
    full, *others = (h.name for h in lab.hosts)
    leave_100mi(api_client, full)
    before = allocated_machines(api_client, full)
    create(api_client, pinned(ns, "greedy", full))
    cond = not_admitted(api_client, ns, "greedy")
    assert "insufficient memory (needs 256Mi)" in cond["message"], cond
    assert "free" not in cond["message"]
    vm_cond = wait_reason(
        api_client, ns, "greedy", c.REASON_NOT_ADMITTED, vm=True, what="the VM saying so too"
    )
    assert vm_cond["message"] == cond["message"]
    with connections(lab) as conns:
        assert hosts_defining(conns, domain_of(api_client, ns, "greedy")) == []
    assert allocated_machines(api_client, full) == before
    # The refused pin holds no place: once memory frees, it is admitted there.
    patch_host(api_client, full, {"spec": {"reserved": {"memory": "0"}}})
    with connections(lab) as conns:
        domain = domain_of(api_client, ns, "greedy")
        eventually(
            lambda: hosts_defining(conns, domain) == [full],
            timeout=60,
            what="the pinned machine built once its host has room",
        )
    assert others  # the lab has several hosts; the others were never involved


@pytest.fixture
def restricted(lab: LabInfo, api_client: client.ApiClient, ns: str) -> Iterator[str]:
    """The policy applied, a user `tenant` who may edit LibvirtMachines in `ns`, and the policy
    seen by admission (a dry run refused); everything removed after."""
    rbac = client.RbacAuthorizationV1Api(api_client)
    rbac.create_namespaced_role(
        ns,
        {
            "metadata": {"name": "machines"},
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "resources": ["libvirtmachines"],
                    "verbs": ["create", "get", "patch", "update"],
                }
            ],
        },
    )
    for user in ("tenant", "pinner"):
        rbac.create_namespaced_role_binding(
            ns,
            {
                "metadata": {"name": user},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "machines",
                },
                "subjects": [{"apiGroup": RBAC, "kind": "User", "name": user}],
            },
        )
    apply(lab, POLICY)
    try:
        with impersonating(lab, "tenant") as tenant:
            _vm, probe = pinned(ns, "probe", lab.hosts[0].name)
            eventually(
                lambda: _refused(
                    lambda: client.CustomObjectsApi(tenant).create_namespaced_custom_object(
                        GROUP, V, ns, "libvirtmachines", probe, dry_run="All"
                    )
                ),
                timeout=30,
                what="admission enforcing the new policy",
            )
        yield ns
    finally:
        kubectl(lab, "delete", "--ignore-not-found", "-f", str(POLICY))


def _refused(call: Any) -> bool:
    try:
        call()
    except ApiException as err:
        if err.status in (403, 422):
            return True
        raise
    return False


class impersonating:  # noqa: N801 - used as a context manager, like a function
    """An admin client that acts as `user` (with `group`), as `kubectl --as` does."""

    def __init__(self, lab: LabInfo, user: str, group: str | None = None) -> None:
        self._api: client.ApiClient = config.new_client_from_config(lab.kubeconfig)
        self._api.set_default_header("Impersonate-User", user)
        if group is not None:
            self._api.set_default_header("Impersonate-Group", group)

    def __enter__(self) -> client.ApiClient:
        return self._api

    def __exit__(self, *_: object) -> None:
        self._api.close()


def test_the_optional_policy_lets_only_pinners_pin(
    fleet: Fleet, api_client: client.ApiClient, lab: LabInfo, restricted: str
) -> None:
    ns, target = restricted, lab.hosts[1].name
    with impersonating(lab, "tenant") as tenant:
        custom = client.CustomObjectsApi(tenant)
        _vm, by_host = pinned(ns, "by-host", target)
        with pytest.raises(ApiException) as err:
            custom.create_namespaced_custom_object(GROUP, V, ns, "libvirtmachines", by_host)
        assert err.value.status == 403, err.value.body
        assert "only members of vm-api.io:pinners" in str(err.value.body)
        _vm, by_label = unplaced(ns, "by-label")
        by_label["metadata"]["labels"][c.HOST_LABEL] = target
        with pytest.raises(ApiException) as err:
            custom.create_namespaced_custom_object(GROUP, V, ns, "libvirtmachines", by_label)
        assert err.value.status == 403, err.value.body
        # Without a host: allowed; placement chooses one, and the tenant cannot relabel it.
        vm, free = unplaced(ns, "free")
        create(api_client, [vm])
        custom.create_namespaced_custom_object(GROUP, V, ns, "libvirtmachines", free)
        placed: str = eventually(
            lambda: custom.get_namespaced_custom_object(GROUP, V, ns, "libvirtmachines", "free")[
                "spec"
            ].get("host"),
            timeout=60,
            what="the tenant's machine placed",
        )
        other = next(h.name for h in lab.hosts if h.name != placed)
        with pytest.raises(ApiException) as err:
            custom.patch_namespaced_custom_object(
                GROUP,
                V,
                ns,
                "libvirtmachines",
                "free",
                {"metadata": {"labels": {c.HOST_LABEL: other}}},
            )
        assert err.value.status == 403, err.value.body
    with impersonating(lab, "pinner", "vm-api.io:pinners") as pinner:
        vm, allowed = pinned(ns, "allowed", target)
        create(api_client, [vm])
        client.CustomObjectsApi(pinner).create_namespaced_custom_object(
            GROUP, V, ns, "libvirtmachines", allowed
        )
    with connections(lab) as conns:
        domain = domain_of(api_client, ns, "allowed")
        eventually(
            lambda: hosts_defining(conns, domain) == [target],
            timeout=60,
            what="the pinner's machine built on its host",
        )
