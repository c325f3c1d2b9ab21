"""The committed CRD is exactly what the models produce, and it is a helpful structural schema."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from generic import constants as c
from generic.crd import CRD_PATH, main, virtual_machine_crd, virtual_machine_yaml
from generic.crdgen import SchemaError, missing_descriptions, structural_schema


def _schema() -> dict[str, Any]:
    version = virtual_machine_crd()["spec"]["versions"][0]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _walk(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for sub in node.get("properties", {}).values():
        found.extend(_walk(sub))
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            found.extend(_walk(node[key]))
    return found


def test_committed_yaml_is_regenerated_output() -> None:
    assert CRD_PATH.read_text() == virtual_machine_yaml(), "run: python -m generic.crd"
    assert main(["--check"]) == 0


def test_every_spec_and_status_field_is_described() -> None:
    schema = _schema()
    assert missing_descriptions(schema["properties"]["spec"]) == []
    assert missing_descriptions(schema["properties"]["status"]) == []


def test_schema_is_structural() -> None:
    for node in _walk(_schema()):
        assert "$ref" not in node
        assert "allOf" not in node
        assert "title" not in node
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True
        else:
            assert "type" in node, node


def test_names_columns_and_subresource() -> None:
    crd = virtual_machine_crd()
    assert crd["metadata"]["name"] == c.CRD_NAME
    names = crd["spec"]["names"]
    assert names["shortNames"] == ["vm", "vms"]
    assert names["categories"] == [c.CATEGORY]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {col["name"]: col for col in version["additionalPrinterColumns"]}
    assert list(columns) == ["Power", "Ready", "Reason", "Provider-ID", "Primary-IP", "Age"]
    assert columns["Primary-IP"]["priority"] == 1
    assert columns["Provider-ID"]["priority"] == 1
    assert crd["metadata"].get("labels") is None  # the generic VM is not a provider kind


def test_limits_keys_and_rules() -> None:
    spec = _schema()["properties"]["spec"]
    props = spec["properties"]
    assert props["infrastructureRef"]["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"
    assert props["powerState"]["default"] == "PoweredOn"
    assert props["powerOffMode"]["default"] == "TrySoft"
    assert props["disks"]["maxItems"] == 60
    assert props["disks"]["x-kubernetes-list-map-keys"] == ["name"]
    interfaces = props["network"]["properties"]["interfaces"]
    assert interfaces["maxItems"] == 10
    assert interfaces["x-kubernetes-list-type"] == "map"
    assert props["network"]["properties"]["nameservers"]["maxItems"] == 3
    assert props["tags"]["maxProperties"] == 50
    size = props["bootDisk"]["properties"]["sizeGiB"]
    assert size["minimum"] == 1
    assert size["x-kubernetes-validations"][0]["rule"] == "self >= oldSelf"
    memory = props["instanceType"]["properties"]["resources"]["properties"]["memory"]
    assert memory["x-kubernetes-int-or-string"] is True
    blank = props["disks"]["items"]["properties"]["source"]["properties"]["blank"]
    assert blank["enum"] == [True]
    assert "blank" not in props["bootDisk"]["properties"]["source"]["properties"]
    conditions = _schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_preserve_unknown_fields_only_for_free_form_maps() -> None:
    class Free(BaseModel):
        anything: dict[str, Any] = Field(description="free")

    assert structural_schema(Free)["properties"]["anything"] == {
        "description": "free",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    assert all("x-kubernetes-preserve-unknown-fields" not in n for n in _walk(_schema()))


def test_unions_without_structural_form_are_refused() -> None:
    class Ambiguous(BaseModel):
        value: int | list[str]

    with pytest.raises(SchemaError, match="union"):
        structural_schema(Ambiguous)


def test_rules_of_a_type_and_of_the_field_using_it_both_apply() -> None:
    spec = _schema()["properties"]["spec"]["properties"]
    for source in (
        spec["bootDisk"]["properties"]["source"],
        spec["disks"]["items"]["properties"]["source"],
    ):
        messages = [rule["message"] for rule in source["x-kubernetes-validations"]]
        assert "source is immutable" in messages
        assert any(m.startswith("set exactly one of") for m in messages)
