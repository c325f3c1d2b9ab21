"""`kubectl vm top` in the lab, as users run it: CPU and memory of the module's busybox guest
from the daemon's bulk statistics, through the lab's API server and its aggregation layer, for a
ServiceAccount allowed in the guest's namespace; refused for another namespace, by the API
server without the stats role there and by the daemon itself without the right to read that
namespace's LibvirtMachines; across namespaces, only the namespaces it may read; and straight to
the daemon's port, forged headers see nothing.

One daemon and one booted guest serve the module (conftest.py). 21 to 41 s warm in the runs so
far, most of it the guest's boot; each `kubectl vm top` takes two samples a second apart.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support.console import (
    STATS_CLUSTER_ROLE,
    direct_request,
    grant_machine_reading,
    grant_stats,
    lab_pki,
    run_top,
    top_rows,
    user_kubeconfig,
)
from tests.support.factories import HOST, pair
from tests.support.kube import create, get, namespace
from tests.support.lab_access import LabInfo
from tests.support.waiting import GiveUp, eventually

STATS_PREFIX = "/apis/subresources.infrastructure.vm-api.io/v1alpha1"
MEBIBYTES = re.compile(r"^(\d+)Mi$")
MILLICORES = re.compile(r"^(\d+)m$")


@pytest.fixture(scope="module")
def other_ns(api_client: client.ApiClient, guest_ns: str) -> Iterator[str]:
    """A second namespace with a machine on the same host, defined and powered off (the daemon
    holds it, so an unfiltered list would show it)."""
    with namespace(api_client) as ns:
        create(api_client, pair(ns, "hidden", vm_spec={"powerState": "PoweredOff"}))

        def defined() -> dict[str, Any] | None:
            lm = get(api_client, ns, "hidden", vm=False)
            status = (lm or {}).get("status") or {}
            return lm if status.get("powerState") == "PoweredOff" else None

        eventually(defined, timeout=120, what=f"LibvirtMachine {ns}/hidden defined, PoweredOff")
        yield ns


@pytest.fixture(scope="module")
def viewer(
    lab: LabInfo,
    api_client: client.ApiClient,
    guest_ns: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, str]:
    """A ServiceAccount allowed `kubectl vm top` in the guest's namespace only: deploy/'s stats
    ClusterRole and reading LibvirtMachines, both bound there. Its kubeconfig and user name."""
    path = tmp_path_factory.mktemp("top") / "viewer.kubeconfig"
    user = user_kubeconfig(lab, api_client, path, namespace=guest_ns, name="viewer")
    grant_stats(api_client, guest_ns, user)
    grant_machine_reading(api_client, guest_ns, user)
    return path, user


def _running_row(kubeconfig: Path | str, *args: str) -> dict[str, str]:
    code, out, err = run_top(kubeconfig, *args)
    if code != 0:
        raise GiveUp(f"kubectl vm top exited {code}: {err}")
    rows = [r for r in top_rows(out) if r["NAME"] == "guest" and r["STATE"] == "Running"]
    return rows[0] if rows and MILLICORES.match(rows[0]["CPU(cores)"]) else {}


def test_a_user_allowed_in_the_namespace_sees_the_machines_cpu_and_memory(
    viewer: tuple[Path, str], guest_ns: str
) -> None:
    kubeconfig, _user = viewer
    row = eventually(
        lambda: _running_row(kubeconfig, "guest", "-n", guest_ns),
        timeout=60,
        interval=1.0,
        what="kubectl vm top showing the guest running with a CPU figure",
    )
    assert row["HOST"] == HOST
    assert row["VCPUS"] == "1"
    cpu = MILLICORES.match(row["CPU(cores)"])
    assert cpu is not None
    # libvirt's cpu.time is the whole qemu process' (its vCPU, emulator and I/O threads): at
    # most every CPU of the machine, with some room for the two samples' timing.
    assert 0 <= int(cpu.group(1)) <= 1100 * (os.cpu_count() or 1), row
    memory, rss = MEBIBYTES.match(row["MEMORY"]), MEBIBYTES.match(row["RSS"])
    assert memory is not None, row
    assert rss is not None, row
    # The sample's 256 MiB guest; qemu's resident memory is some of it and more than nothing.
    assert int(memory.group(1)) == 256, row
    assert int(rss.group(1)) > 0, row
    # The namespace's list has the same machine.
    listed = eventually(
        lambda: _running_row(kubeconfig, "-n", guest_ns),
        timeout=30,
        interval=1.0,
        what="kubectl vm top -n listing the guest",
    )
    assert listed["HOST"] == HOST


def test_another_namespace_is_refused_by_the_api_server(
    viewer: tuple[Path, str], other_ns: str
) -> None:
    kubeconfig, user = viewer
    code, _out, err = run_top(kubeconfig, "-n", other_ns)
    assert code == 1
    assert "Error from server (Forbidden)" in err, err
    assert user in err, err
    assert "libvirtmachinestats" in err, err
    code, _out, err = run_top(kubeconfig, "hidden", "-n", other_ns)
    assert code == 1
    assert "Forbidden" in err, err


def test_the_stats_role_alone_does_not_show_a_namespaces_machines(
    lab: LabInfo,
    api_client: client.ApiClient,
    other_ns: str,
    tmp_path: Path,
) -> None:
    """Bound to the stats role in a namespace whose LibvirtMachines it may not read, the user
    gets past the API server and is refused by the daemon's own review."""
    kubeconfig = tmp_path / "stats-only.kubeconfig"
    user = user_kubeconfig(lab, api_client, kubeconfig, namespace=other_ns, name="stats-only")
    grant_stats(api_client, other_ns, user)

    def refused_by_the_daemon() -> str | None:
        code, _out, err = run_top(kubeconfig, "-n", other_ns)
        assert code == 1, err
        # Until the RoleBinding reaches the API server's authorizer, its own 403 names
        # libvirtmachinestats; the daemon's names the LibvirtMachines.
        return err if 'cannot list resource "libvirtmachines"' in err else None

    err = eventually(refused_by_the_daemon, timeout=30, what="the daemon's own 403")
    assert user in err, err
    assert 'API group "infrastructure.vm-api.io"' in err, err
    code, _out, err = run_top(kubeconfig, "hidden", "-n", other_ns)
    assert code == 1
    assert 'cannot get resource "libvirtmachines"' in err, err


@contextlib.contextmanager
def _cluster_binding(api_client: client.ApiClient, user: str) -> Iterator[None]:
    rbac = client.RbacAuthorizationV1Api(api_client)
    account_ns, account = user.split(":")[2:4]
    name = f"e2e-top-{account_ns}-{account}"
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": STATS_CLUSTER_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_ns}],
        }
    )
    try:
        yield
    finally:
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role_binding(name)


def test_across_namespaces_a_user_sees_only_the_namespaces_it_may_read(
    lab: LabInfo,
    api_client: client.ApiClient,
    viewer: tuple[Path, str],
    guest_ns: str,
    other_ns: str,
) -> None:
    kubeconfig, user = viewer
    # The lab's admin sees both machines of the host: the filter below is authorisation.
    code, out, err = run_top(lab.kubeconfig, "-A", "--host", HOST)
    assert code == 0, err
    names = {(r["NAMESPACE"], r["NAME"]) for r in top_rows(out)}
    assert {(guest_ns, "guest"), (other_ns, "hidden")} <= names, out
    with _cluster_binding(api_client, user):

        def listed() -> list[dict[str, str]] | None:
            code, out, err = run_top(kubeconfig, "-A", "--host", HOST)
            if code != 0:  # the ClusterRoleBinding has not reached the authorizer yet
                assert "Forbidden" in err, err
                return None
            return top_rows(out)

        rows = eventually(listed, timeout=30, what="kubectl vm top -A for the viewer")
    namespaces = {r["NAMESPACE"] for r in rows}
    assert guest_ns in namespaces, rows
    assert other_ns not in namespaces, rows


def test_straight_to_the_daemons_port_forged_headers_see_nothing(
    lab: LabInfo, console_port: int, guest_ns: str
) -> None:
    """The daemon's own checks, the API server bypassed: no front-proxy certificate, 401; the
    real one for a user who may read no LibvirtMachine: 403 for a namespace, and an empty list
    across namespaces."""
    pki = lab_pki(lab)
    ca = pki / "console-ca.crt"
    one = f"{STATS_PREFIX}/namespaces/{guest_ns}/libvirtmachinestats/guest"
    forged = {"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"}
    code, body = direct_request(console_port, one, forged, ca=ca)
    assert code == 401, body
    real = (pki / "front-proxy-client.crt", pki / "front-proxy-client.key")
    mallory = {"X-Remote-User": "mallory"}
    code, body = direct_request(console_port, one, mallory, cert=real, ca=ca)
    assert code == 403, body
    assert json.loads(body)["message"].startswith('User "mallory" cannot get resource'), body
    code, body = direct_request(
        console_port, f"{STATS_PREFIX}/libvirtmachinestats", mallory, cert=real, ca=ca
    )
    assert code == 200, body
    assert json.loads(body)["items"] == [], body
