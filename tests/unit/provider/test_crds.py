"""The committed CRDs are exactly what the models generate, and they say what each field means."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from generic.crdgen import missing_descriptions
from libvirt_provider import constants as c
from libvirt_provider.crds import CRDS, crd_path, crd_yaml
from libvirt_provider.crds.__main__ import main


def schema(spec_name: str) -> dict[str, Any]:
    spec = next(s for s in CRDS if s.kind == spec_name)
    crd = yaml.safe_load(crd_path(spec).read_text())
    return crd


def test_committed_files_are_up_to_date() -> None:
    assert main(["--check"]) == 0, "run: python -m libvirt_provider.crds"


@pytest.mark.parametrize("spec", CRDS, ids=lambda s: s.kind)
def test_every_field_has_a_description(spec: Any) -> None:
    crd = yaml.safe_load(crd_yaml(spec))
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in ("spec", "status"):
        if part in root["properties"]:
            assert missing_descriptions(root["properties"][part]) == [], part


def test_the_libvirt_machine_crd_is_found_by_the_generic_controller() -> None:
    crd = schema(c.MACHINE_KIND)
    assert crd["metadata"]["labels"] == {c.VM_API_CRD_LABEL: c.VM_API_CRD_LABEL_VALUE}
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["shortNames"] == list(c.MACHINE_SHORT_NAMES)
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [col["name"] for col in version["additionalPrinterColumns"]]
    assert columns[:4] == ["Host", "Power", "Ready", "Reason"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for contract_field in (
        "addresses",
        "powerState",
        "providerID",
        "providerMetadata",
        "conditions",
    ):
        assert contract_field in status


@pytest.mark.parametrize(
    "kind", [c.IMAGE_KIND, c.MACHINE_CLASS_KIND, c.NETWORK_KIND, c.STORAGE_CLASS_KIND]
)
def test_catalog_kinds_are_cluster_scoped(kind: str) -> None:
    crd = schema(kind)
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["group"] == c.GROUP


def test_exactly_one_of_rules_travel_to_the_api_server() -> None:
    crd = schema(c.IMAGE_KIND)
    source = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["source"]
    assert source["x-kubernetes-validations"][0]["rule"] == "has(self.http) != has(self.volume)"
