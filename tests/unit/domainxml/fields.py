"""The leaf fields of a model and copies of a model with exactly one field changed.

Why a module of its own: the field-coverage test (every field shows in some golden file) and the
drift tests (every owned field is told apart when it drifts) walk the same fields the same way.
"""

from __future__ import annotations

import enum
import types
import typing
import uuid
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

Path = tuple[str, ...]


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found.extend(_models_in(arg))
    return found


def leaf_paths(model: type[BaseModel], prefix: Path = ()) -> Iterator[Path]:
    for name, field in model.model_fields.items():
        nested = _models_in(field.annotation)
        if nested:
            for sub in nested:
                yield from leaf_paths(sub, (*prefix, name))
        else:
            yield (*prefix, name)


def _optional(model: BaseModel, name: str) -> bool:
    annotation = type(model).model_fields[name].annotation
    return type(None) in typing.get_args(annotation) or isinstance(annotation, types.UnionType)


def _alternatives(model: BaseModel, name: str, value: Any) -> list[Any]:
    alternatives: list[Any] = [None] if value is not None and _optional(model, name) else []
    if isinstance(value, bool):
        alternatives.append(not value)
    elif isinstance(value, enum.Enum):
        alternatives.extend(m for m in type(value) if m != value)
    elif isinstance(value, int):
        alternatives.append(value + 1)
    elif isinstance(value, uuid.UUID):
        alternatives.append(uuid.uuid4())
    elif isinstance(value, str):
        alternatives.append(value + "x")
    elif isinstance(value, dict):
        alternatives.append({} if value else {"k": "v"})
    return alternatives


def variants(model: BaseModel, path: Path) -> Iterator[BaseModel]:
    """Copies of `model` with exactly the field at `path` changed (validation bypassed)."""
    head, rest = path[0], path[1:]
    value = getattr(model, head)
    if not rest:
        for alternative in _alternatives(model, head, value):
            yield model.model_copy(update={head: alternative})
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            for new in variants(item, rest):
                yield model.model_copy(update={head: (*value[:i], new, *value[i + 1 :])})
    elif isinstance(value, BaseModel):
        for new in variants(value, rest):
            yield model.model_copy(update={head: new})
