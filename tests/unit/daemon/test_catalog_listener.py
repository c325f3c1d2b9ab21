"""What a catalog change wakes: every machine, and for images only a spec change or deletion."""

from __future__ import annotations

from typing import Any, cast

from catalog.constants import (
    CATALOG_PLURALS,
    GROUP,
    VERSION,
    VOLUME_ATTRIBUTES_CLASS_PLURAL,
    WATCHED_KINDS,
)
from libvirt_provider.adapters.host.controller import MachineController, catalog_listener
from libvirt_provider.images.cache import ImageCache


class _Counts:
    def __init__(self) -> None:
        self.woken = 0
        self.passes = 0

    def wake_all(self) -> None:
        self.woken += 1

    def request_pass(self) -> None:
        self.passes += 1


def _image(generation: int) -> dict[str, Any]:
    return {"metadata": {"name": "debian", "generation": generation}}


def _listener(plural: str, counts: _Counts) -> Any:
    return catalog_listener(
        plural, controller=cast(MachineController, counts), images=cast(ImageCache, counts)
    )


def test_an_image_wakes_machines_on_spec_changes_and_deletion_only() -> None:
    counts = _Counts()
    on_image = _listener("libvirtimages", counts)
    on_image("ADDED", _image(1))
    on_image("MODIFIED", _image(1))  # a host's import entry in status: nothing for machines
    assert (counts.woken, counts.passes) == (1, 1)
    on_image("MODIFIED", _image(2))
    on_image("DELETED", _image(2))
    assert (counts.woken, counts.passes) == (3, 3)
    on_image("RELISTED", None)  # a relist may hide anything, deletions included
    assert (counts.woken, counts.passes) == (4, 4)


def test_any_change_of_another_catalog_kind_wakes_every_machine() -> None:
    counts = _Counts()
    on_class = _listener("libvirtmachineclasses", counts)
    on_class("MODIFIED", {"metadata": {"name": "small", "generation": 1}})
    on_class("MODIFIED", {"metadata": {"name": "small", "generation": 1}})
    assert (counts.woken, counts.passes) == (2, 0)


def test_a_changed_volume_attributes_class_wakes_every_machine() -> None:
    counts = _Counts()
    on_class = _listener(VOLUME_ATTRIBUTES_CLASS_PLURAL, counts)
    on_class("MODIFIED", {"metadata": {"name": "slow"}, "parameters": {"readIOPS": "10"}})
    assert (counts.woken, counts.passes) == (1, 0)


def test_volume_attributes_classes_are_watched_in_their_own_group() -> None:
    assert WATCHED_KINDS[VOLUME_ATTRIBUTES_CLASS_PLURAL] == ("storage.k8s.io", "v1")
    assert all(WATCHED_KINDS[p] == (GROUP, VERSION) for p in CATALOG_PLURALS)


def test_a_snapshot_wakes_machines_only_when_what_a_clone_reads_changes() -> None:
    counts = _Counts()
    on_snapshot = _listener("libvirtsnapshots", counts)

    def snap(status: dict[str, Any], **meta: Any) -> dict[str, Any]:
        return {"metadata": {"namespace": "t", "name": "s", **meta}, "status": status}

    on_snapshot("ADDED", snap({}))
    on_snapshot("MODIFIED", snap({"host": "h1"}))
    on_snapshot("MODIFIED", snap({"host": "h1", "conditions": [{"reason": "InProgress"}]}))
    assert counts.woken == 2  # the progress write changed nothing a clone reads
    on_snapshot("MODIFIED", snap({"host": "h1", "readyToUse": True}))
    on_snapshot("MODIFIED", snap({"host": "h1", "readyToUse": True}, deletionTimestamp="now"))
    on_snapshot("DELETED", snap({}))
    on_snapshot("RELISTED", None)
    assert counts.woken == 6
    assert WATCHED_KINDS["libvirtsnapshots"] == (GROUP, VERSION)
