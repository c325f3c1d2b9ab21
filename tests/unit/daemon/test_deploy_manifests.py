"""deploy/ must stay installable with `kubectl apply -k deploy/`: kustomize reads the CRDs through
crds/Kustomization, which has to name every CRD file there."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]


def test_the_crd_kustomization_names_every_crd_file() -> None:
    kustomization = yaml.safe_load((REPO / "crds" / "Kustomization").read_text())
    listed = set(kustomization["resources"])
    present = {p.name for p in (REPO / "crds").glob("*.yaml")}
    assert listed == present
