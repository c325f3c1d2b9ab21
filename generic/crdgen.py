"""Generate structural apiextensions.k8s.io/v1 CRDs from pydantic models.

Why this exists: a CRD written by hand and a model written by hand drift apart. Here the model is
the source; this module turns pydantic's JSON schema into the subset Kubernetes accepts as a
structural schema (everything inlined, no `$ref`, no `null` types, `anyOf` only for
int-or-string) and refuses anything it does not understand rather than emitting a schema the API
server would silently interpret differently. Kubernetes extensions (`x-kubernetes-validations`,
list-map keys, int-or-string) are written on the models through `json_schema_extra` and pass
through unchanged.

It is reusable for any API group: describe the kind with `CrdSpec` and call `build_crd`, then
`render_yaml`. `missing_descriptions` lists schema paths without a description, so a test can
insist that `kubectl explain` helps everywhere.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

__all__ = [
    "CrdSpec",
    "PrinterColumn",
    "SchemaError",
    "build_crd",
    "missing_descriptions",
    "render_yaml",
    "structural_schema",
    "write_if_changed",
]

Schema = dict[str, Any]

_PASSTHROUGH = frozenset(
    {
        "type",
        "description",
        "default",
        "enum",
        "format",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "required",
        "nullable",
    }
)
_DROPPED = frozenset({"title", "$defs"})
_INT_OR_STRING = "x-kubernetes-int-or-string"


class SchemaError(ValueError):
    """The model's JSON schema uses a construct that has no structural CRD equivalent."""


def structural_schema(model: type[BaseModel]) -> Schema:
    """The structural OpenAPI v3 schema of `model`, as its wire (alias) names."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs: dict[str, Schema] = raw.get("$defs", {})
    return _convert(raw, defs, path=model.__name__)


def _resolve(node: Schema, defs: Mapping[str, Schema], path: str) -> Schema:
    """Inline `$ref`, single-item `allOf` and optional (`anyOf` with null) into one node."""
    node = dict(node)
    if "$ref" in node:
        name = node.pop("$ref").rsplit("/", 1)[-1]
        target = _resolve(copy.deepcopy(defs[name]), defs, path)
        return _merge(target, node)
    if "allOf" in node:
        parts = node.pop("allOf")
        if len(parts) != 1:
            raise SchemaError(f"{path}: allOf with {len(parts)} members has no structural form")
        return _merge(_resolve(parts[0], defs, path), node)
    if "anyOf" in node and not node.get(_INT_OR_STRING):
        options = [o for o in node.pop("anyOf") if o != {"type": "null"}]
        if len(options) != 1:
            raise SchemaError(f"{path}: a union of {len(options)} types has no structural form")
        if node.get("default", ...) is None:
            del node["default"]
        return _merge(_resolve(options[0], defs, path), node)
    return node


_VALIDATIONS = "x-kubernetes-validations"


def _merge(target: Schema, field: Schema) -> Schema:
    """A referenced type's schema with the field's own keywords on top; CEL rules of both apply."""
    merged = {**target, **field}
    if _VALIDATIONS in target and _VALIDATIONS in field:
        merged[_VALIDATIONS] = [*target[_VALIDATIONS], *field[_VALIDATIONS]]
    return merged


def _convert(node: Schema, defs: Mapping[str, Schema], path: str) -> Schema:
    node = _resolve(node, defs, path)
    out: Schema = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties":
            out[key] = {name: _convert(sub, defs, f"{path}.{name}") for name, sub in value.items()}
        elif key == "items":
            out[key] = _convert(value, defs, f"{path}[]")
        elif key == "additionalProperties":
            if value is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif value is not False:
                out[key] = _convert(value, defs, f"{path}{{}}")
        elif key == "const":
            out["enum"] = [value]
        elif key == "description":
            out[key] = " ".join(str(value).split())
        elif key == "anyOf":
            out[key] = [{"type": o["type"]} for o in value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            # JSON Schema's numeric form; OpenAPI v3.0 (what a CRD takes) spells it as the bound
            # plus a flag.
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key in _PASSTHROUGH or key.startswith("x-kubernetes-"):
            out[key] = value
        else:
            raise SchemaError(f"{path}: JSON schema keyword {key!r} has no structural form")
    return _ordered(out)


_ORDER = ("description", "type")


def _ordered(node: Schema) -> Schema:
    head = {k: node[k] for k in _ORDER if k in node}
    return {**head, **{k: v for k, v in sorted(node.items()) if k not in head}}


def missing_descriptions(schema: Schema, path: str = "") -> list[str]:
    """Paths of properties (recursively) that carry no description."""
    missing: list[str] = []
    for name, sub in schema.get("properties", {}).items():
        here = f"{path}.{name}"
        if not sub.get("description"):
            missing.append(here)
        missing.extend(missing_descriptions(sub, here))
    if "items" in schema:
        missing.extend(missing_descriptions(schema["items"], f"{path}[]"))
    return missing


@dataclass(frozen=True)
class PrinterColumn:
    """An additional column of `kubectl get`."""

    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    priority: int = 0

    def as_dict(self) -> Schema:
        column: Schema = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            column["description"] = self.description
        if self.priority:
            column["priority"] = self.priority
        return column


@dataclass(frozen=True)
class CrdSpec:
    """Everything about a custom resource kind except its schema, which comes from models."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    description: str
    spec_model: type[BaseModel]
    status_model: type[BaseModel] | None = None
    scope: str = "Namespaced"
    short_names: Sequence[str] = ()
    categories: Sequence[str] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    printer_columns: Sequence[PrinterColumn] = ()
    spec_required: bool = True
    # JSON paths a client may select by with a field selector (Kubernetes 1.32+ GA).
    selectable_fields: Sequence[str] = ()
    root_rules: Sequence[Mapping[str, str]] = ()
    """CEL rules on the whole object (`x-kubernetes-validations` at the root), e.g. on its name."""


def build_crd(spec: CrdSpec) -> Schema:
    """The CustomResourceDefinition object for `spec`, ready to apply."""
    properties: Schema = {
        "apiVersion": {
            "description": "Versioned schema of this representation of an object.",
            "type": "string",
        },
        "kind": {"description": "The REST resource this object represents.", "type": "string"},
        "metadata": {"type": "object"},
        "spec": structural_schema(spec.spec_model),
    }
    if spec.status_model is not None:
        properties["status"] = structural_schema(spec.status_model)
    root: Schema = {"description": spec.description, "type": "object", "properties": properties}
    if spec.spec_required:
        root["required"] = ["spec"]
    if spec.root_rules:
        root[_VALIDATIONS] = [dict(rule) for rule in spec.root_rules]
    version: Schema = {"name": spec.version, "served": True, "storage": True}
    if spec.printer_columns:
        version["additionalPrinterColumns"] = [
            *(column.as_dict() for column in spec.printer_columns),
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]
    version["schema"] = {"openAPIV3Schema": root}
    if spec.selectable_fields:
        version["selectableFields"] = [{"jsonPath": path} for path in spec.selectable_fields]
    if spec.status_model is not None:
        version["subresources"] = {"status": {}}
    names: Schema = {"kind": spec.kind, "listKind": f"{spec.kind}List", "plural": spec.plural}
    names["singular"] = spec.singular
    if spec.short_names:
        names["shortNames"] = list(spec.short_names)
    if spec.categories:
        names["categories"] = list(spec.categories)
    metadata: Schema = {"name": f"{spec.plural}.{spec.group}"}
    if spec.labels:
        metadata["labels"] = dict(spec.labels)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {"group": spec.group, "names": names, "scope": spec.scope, "versions": [version]},
    }


_HEADER = "# Generated by `python -m {module}` from the pydantic models; do not edit by hand.\n"


def render_yaml(crd: Schema, *, generator_module: str) -> str:
    """YAML text of `crd`, with a header naming the command that regenerates it."""
    body = yaml.safe_dump(crd, sort_keys=False, width=100, allow_unicode=True)
    return _HEADER.format(module=generator_module) + body


def write_if_changed(path: Path, text: str) -> bool:
    """Write `text` to `path` unless it already holds exactly that; True when written."""
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True
