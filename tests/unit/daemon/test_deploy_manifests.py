"""deploy/ must stay installable with `kubectl apply -k deploy/`: kustomize reads the CRDs through
crds/Kustomization, which has to name every CRD file there."""

from __future__ import annotations

from pathlib import Path

import yaml

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
