"""What an informer keeps of each object: everything a reader uses, not the bookkeeping."""

from __future__ import annotations

import json
from typing import Any, cast

from generic.adapters.informer import INTERN_UP_TO, LAST_APPLIED, slim


def test_managed_fields_and_the_last_applied_copy_are_dropped_and_nothing_else() -> None:
    obj = {
        "metadata": {
            "name": "web",
            "resourceVersion": "7",
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            "annotations": {LAST_APPLIED: "{...}", "vm-api.io/virtual-machine": "web"},
            "labels": {"a": "b"},
        },
        "spec": {"host": "h1"},
        "status": {"conditions": []},
    }
    kept = slim(obj)
    assert kept == {
        "metadata": {
            "name": "web",
            "resourceVersion": "7",
            "annotations": {"vm-api.io/virtual-machine": "web"},
            "labels": {"a": "b"},
        },
        "spec": {"host": "h1"},
        "status": {"conditions": []},
    }
    assert "managedFields" in obj["metadata"], "the object handed in is not changed"


def test_an_object_without_either_is_kept_whole_in_a_copy_of_its_own() -> None:
    obj = {"metadata": {"name": "web", "annotations": {"x": "y"}}, "spec": {"n": [1, {"a": None}]}}
    kept = slim(obj)
    assert kept == obj
    assert kept is not obj
    assert kept["spec"]["n"] is not obj["spec"]["n"]


def test_keys_and_short_strings_are_shared_between_objects() -> None:
    def decoded(name: str) -> dict[str, Any]:
        # Each object from its own decode, as each watch event is: no string is shared yet.
        return cast(
            dict[str, Any],
            json.loads(
                json.dumps(
                    {
                        "metadata": {"name": name},
                        "status": {"reason": "Running", "message": "x" * (INTERN_UP_TO + 1)},
                    }
                )
            ),
        )

    a, b = slim(decoded("a")), slim(decoded("b"))
    key_a = next(k for k in a["status"] if k == "reason")
    key_b = next(k for k in b["status"] if k == "reason")
    assert key_a is key_b
    assert a["status"]["reason"] is b["status"]["reason"]
    assert a["status"]["message"] == b["status"]["message"]
    assert a["status"]["message"] is not b["status"]["message"], "long strings are left alone"
