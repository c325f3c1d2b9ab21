"""Image watch events: only spec changes and deletions wake machines and the image cache."""

from __future__ import annotations

from libvirt_provider.adapters.host.controller import SpecChanges


def test_status_only_events_are_not_changes() -> None:
    seen = SpecChanges()
    assert seen.changed("tiny", 1, deleted=False)  # first sight, e.g. the initial listing
    assert not seen.changed("tiny", 1, deleted=False)  # a host wrote its status entry
    assert seen.changed("tiny", 2, deleted=False)  # the spec changed
    assert seen.changed("tiny", 2, deleted=True)
    assert seen.changed("tiny", 1, deleted=False)  # recreated under the same name


def test_an_object_without_a_generation_always_counts() -> None:
    seen = SpecChanges()
    assert seen.changed("tiny", None, deleted=False)
    assert seen.changed("tiny", None, deleted=False)
