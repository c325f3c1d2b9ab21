"""What the leader keeps of a tenant's objects (`generic.lean`): exactly the fields it reads."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest

from generic.lean import DIGEST_FIELDS, KEPT_METADATA, Kept, lean, lean_text, user_edit_mark

KEPT = Kept.of(labels=["infrastructure.vm-api.io/host"], annotations=["vm-api.io/virtual-machine"])


def _fat(labels: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "vm-api.io/v1alpha1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": "web",
            "namespace": "demo",
            "uid": "u-1",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["vm-api.io/virtualmachine"],
            "ownerReferences": [{"kind": "X", "name": "x", "uid": "u-2"}],
            "generateName": "web-",
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            "labels": {
                **{f"fat.example.com/k{i:05d}": f"v{i}" for i in range(labels)},
                "infrastructure.vm-api.io/host": "h1",
                "team": "a",
            },
            "annotations": {
                "vm-api.io/virtual-machine": "web",
                "kubectl.kubernetes.io/last-applied-configuration": "{...}",
            },
        },
        "spec": {"powerState": "PoweredOn", "selector": {"labels": {"a": "b"}}},
        "status": {"ready": True, "providerMetadata": {"labels": "x"}},
    }


def _compact(obj: object) -> str:
    """JSON as the API server writes it: no whitespace."""
    return json.dumps(obj, separators=(",", ":"))


def _without_digests(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k not in DIGEST_FIELDS.values()}


def test_lean_keeps_the_named_metadata_and_only_the_kept_labels_and_annotations() -> None:
    kept = lean(_fat(), KEPT)
    assert set(DIGEST_FIELDS.values()) <= set(kept["metadata"])
    assert _without_digests(kept["metadata"]) == {
        "name": "web",
        "namespace": "demo",
        "uid": "u-1",
        "resourceVersion": "42",
        "generation": 3,
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "finalizers": ["vm-api.io/virtualmachine"],
        "ownerReferences": [{"kind": "X", "name": "x", "uid": "u-2"}],
        "labels": {"infrastructure.vm-api.io/host": "h1"},
        "annotations": {"vm-api.io/virtual-machine": "web"},
    }
    assert set(kept["metadata"]) <= KEPT_METADATA
    # Spec and status are the CRD's schema: kept as they are.
    assert kept["spec"] == _fat()["spec"]
    assert kept["status"] == _fat()["status"]


def test_lean_drops_maps_left_empty_and_leaves_its_input_alone() -> None:
    obj = _fat()
    before = json.loads(json.dumps(obj))
    kept = lean(obj, Kept())
    assert "labels" not in kept["metadata"]
    assert "annotations" not in kept["metadata"]
    assert obj == before
    assert lean({"kind": "NoMeta"}, KEPT) == {"kind": "NoMeta"}


def test_lean_text_decodes_to_what_lean_keeps_of_labels_and_annotations() -> None:
    event = {"type": "MODIFIED", "object": _fat(labels=500)}
    decoded = json.loads(lean_text(_compact(event), KEPT))
    meta = decoded["object"]["metadata"]
    assert set(DIGEST_FIELDS.values()) <= set(meta)
    assert meta["labels"] == {"infrastructure.vm-api.io/host": "h1"}
    assert meta["annotations"] == {"vm-api.io/virtual-machine": "web"}
    # Every labels map of strings is cut, wherever it is: for VMs and machines, only metadata
    # has one (the text is not parsed to know where a map is).
    assert decoded["object"]["spec"]["selector"]["labels"] == {}
    assert decoded["object"]["status"] == event["object"]["status"]
    assert (
        decoded["object"]["metadata"]["managedFields"]
        == event["object"]["metadata"]["managedFields"]
    )
    assert decoded["type"] == "MODIFIED"


def test_lean_text_leaves_text_without_such_maps_as_it_was() -> None:
    for text in (
        _compact({"a": 1}),
        # A map holding something other than strings is not labels: left alone.
        _compact({"x": {"labels": {"a": 1, "b": "c"}}}),
        # The word inside a string is text, not a key.
        _compact({"note": 'say "labels":{"a":"b"} here'}),
        _compact({"metadata": {"labels": {}}}),
    ):
        assert json.loads(lean_text(text, KEPT)) == json.loads(text)


@pytest.mark.parametrize("spaced", [False, True])
def test_lean_text_reads_escaped_keys_and_values(spaced: bool) -> None:
    labels = {
        "infrastructure.vm-api.io/host": 'h"1',
        'we"ird': "x\\",
        "infrastructure.vm-api.io/hos": "no",
    }
    obj = {"metadata": {"labels": labels, "annotations": {"a": "b"}}}
    text = json.dumps(obj, separators=(", ", ": ") if spaced else (",", ":"))
    escaped = text.replace("/host", "\\u002fhost")
    assert "\\u002fhost" in escaped
    expected = {"labels": {"infrastructure.vm-api.io/host": 'h"1'}, "annotations": {}}
    assert _without_digests(json.loads(lean_text(escaped, KEPT))["metadata"]) == expected
    assert _without_digests(json.loads(lean_text(text, KEPT))["metadata"]) == expected


def test_a_fat_object_never_becomes_its_labels() -> None:
    """What decoding 40,000 labels costs, with and without the cut: the dropped labels are
    never built, not even for a moment."""
    text = _compact({"type": "ADDED", "object": _fat(labels=40_000)})
    tracemalloc.start()
    try:
        json.loads(text)
        _, full = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        decoded = json.loads(lean_text(text, KEPT))
        _, cut = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoded["object"]["metadata"]["labels"] == {"infrastructure.vm-api.io/host": "h1"}
    assert full > 5 * 2**20
    assert cut < 2**20, f"{cut} bytes at the peak"


def _marks(obj: dict[str, Any]) -> tuple[object, object]:
    """The edit marks of `obj` decoded lean from its text, and made lean once decoded."""
    from_text = json.loads(lean_text(_compact(obj), KEPT))["metadata"]
    return user_edit_mark(from_text), user_edit_mark(lean(obj, KEPT)["metadata"])


@pytest.mark.parametrize("field", ["labels", "annotations"])
def test_an_edit_of_a_cut_key_still_changes_the_edit_mark(field: str) -> None:
    """A user touches a machine (a label nobody reads) to make its daemon look again: the lean
    copy must still show that something changed, though the label itself is gone."""
    before = _fat(labels=3)
    after = _fat(labels=3)
    after["metadata"][field]["touched"] = "1"
    text_before, lean_before = _marks(before)
    text_after, lean_after = _marks(after)
    assert text_before != text_after
    assert lean_before != lean_after
    # A status write (the daemon's own) changes neither.
    written = _fat(labels=3)
    written["status"] = {"ready": False}
    assert _marks(written) == (text_before, lean_before)


def test_lean_of_a_lean_copy_keeps_its_digests() -> None:
    once = json.loads(lean_text(_compact(_fat(labels=50)), KEPT))
    twice = lean(once, KEPT)
    assert user_edit_mark(twice["metadata"]) == user_edit_mark(once["metadata"])
    assert lean(twice, KEPT) == twice
    # A map that came empty has no digest, whichever way it was cut.
    empty = {"metadata": {"name": "x", "labels": {}}}
    assert json.loads(lean_text(_compact(empty), KEPT)) == empty
    assert lean(empty, KEPT) == {"metadata": {"name": "x"}}
