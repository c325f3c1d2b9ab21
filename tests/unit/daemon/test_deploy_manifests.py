"""deploy/ must stay installable with `kubectl apply -k deploy/` (kustomize reads the CRDs through
crds/Kustomization, which has to name every CRD file there), and coherent with the daemon's
flags: the probes where the kubelet reaches them, /metrics on loopback only."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
import yaml

from libvirt_provider.__main__ import build_parser
from libvirt_provider.constants import SECRETS_CLUSTER_ROLE

REPO = Path(__file__).resolve().parents[3]


def test_the_crd_kustomization_names_every_crd_file() -> None:
    kustomization = yaml.safe_load((REPO / "crds" / "Kustomization").read_text())
    listed = set(kustomization["resources"])
    present = {p.name for p in (REPO / "crds").glob("*.yaml")}
    assert listed == present


def test_secrets_are_granted_by_a_role_no_binding_in_deploy_uses() -> None:
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "rbac.yaml").read_text()) if d]
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    granting = {
        name
        for name, role in roles.items()
        if any("secrets" in rule.get("resources", []) for rule in role["rules"])
    }
    assert granting == {SECRETS_CLUSTER_ROLE}
    bound = {
        d["roleRef"]["name"] for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
    }
    assert SECRETS_CLUSTER_ROLE not in bound  # a cluster admin binds it per namespace


def _workloads() -> list[tuple[str, dict[str, Any]]]:
    """Every container of deploy/'s DaemonSet and Deployments, with its manifest's name."""
    found = []
    for path in sorted((REPO / "deploy").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") in ("DaemonSet", "Deployment"):
                for container in doc["spec"]["template"]["spec"]["containers"]:
                    found.append((str(path.relative_to(REPO)), container))
    return found


def test_the_manifests_cover_both_workloads() -> None:
    assert {name for name, _ in _workloads()} == {
        "deploy/daemonset.yaml",
        "deploy/remote/deployment.yaml",
    }


@pytest.mark.parametrize(("manifest", "container"), _workloads())
def test_probes_reach_the_health_port_and_metrics_stay_on_loopback(
    manifest: str, container: dict[str, Any]
) -> None:
    """The kubelet probes the pod's address, so the probes must listen there; /metrics must not
    (docs/security.md): the flags the manifest passes, read by the daemon's own parser."""
    args = build_parser().parse_args(container.get("args", []))
    assert not ipaddress.ip_address(args.health_address).is_loopback, manifest
    assert ipaddress.ip_address(args.metrics_address).is_loopback, manifest
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("livenessProbe", "readinessProbe"):
        port = container[probe]["httpGet"]["port"]
        assert ports.get(port, port) == args.health_port, f"{manifest}: {probe}"
    # Nothing on the pod network points at the loopback-only metrics port.
    assert args.metrics_port not in ports.values(), manifest


def test_nothing_in_deploy_exposes_the_metrics_port() -> None:
    metrics_port = build_parser().parse_args([]).metrics_port
    for path in sorted((REPO / "deploy").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") in ("Service", "ServiceMonitor", "PodMonitor"):
                assert str(metrics_port) not in yaml.safe_dump(doc), path


def test_the_node_restriction_names_the_daemonsets_account_and_is_installed() -> None:
    """The policies match requests by user name: a renamed ServiceAccount or namespace would
    leave every node's daemon unrestricted, silently."""
    daemonset = yaml.safe_load((REPO / "deploy" / "daemonset.yaml").read_text())
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    user = f"system:serviceaccount:{daemonset['metadata']['namespace']}:{account}"
    docs = [d for d in yaml.safe_load_all((REPO / "deploy" / "node-restriction.yaml").read_text())]
    policies = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    bindings = {d["spec"]["policyName"] for d in docs if d["kind"].endswith("PolicyBinding")}
    assert len(policies) == 2
    for policy in policies:
        assert policy["metadata"]["name"] in bindings
        (condition,) = policy["spec"]["matchConditions"]
        assert f"request.userInfo.username == '{user}'" in condition["expression"]
    kustomization = yaml.safe_load((REPO / "deploy" / "kustomization.yaml").read_text())
    assert "node-restriction.yaml" in kustomization["resources"]
