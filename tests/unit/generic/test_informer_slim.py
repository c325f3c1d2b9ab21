"""What an informer keeps of each object: everything a reader uses, not the bookkeeping."""

from __future__ import annotations

from generic.adapters.informer import LAST_APPLIED, slim


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


def test_an_object_without_either_is_kept_as_it_is() -> None:
    obj = {"metadata": {"name": "web", "annotations": {"x": "y"}}, "spec": {}}
    assert slim(obj) is obj
