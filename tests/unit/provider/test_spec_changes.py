"""Watch events worth a pass: an image's spec change or deletion (which wake machines and the image
cache); of a machine's status, placement's preemption mark and a migration's lock only."""

from __future__ import annotations

from libvirt_provider.adapters.host.controller import SpecChanges, machine_fingerprint


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


def test_a_machines_own_status_writes_are_echoes_but_a_preemption_is_not() -> None:
    meta = {"name": "web", "namespace": "ns", "annotations": {}, "labels": {}}
    before = machine_fingerprint(meta, {"powerState": "PoweredOn"})
    assert machine_fingerprint(meta, {"powerState": "PoweredOff"}) == before
    marked = {"powerState": "PoweredOn", "preemption": {"preemptedAt": "2026-12-01T09:00:00Z"}}
    assert machine_fingerprint(meta, marked) != before  # placement's mark wakes the host
    assert machine_fingerprint(meta, {"powerState": "PoweredOff"}) == before  # and its end


def test_a_migrations_lock_and_its_release_wake_the_machine() -> None:
    """A machine deleted while a migration held it waits for the lock's release: the release,
    written by the migration's pass, must start the deletion's pass."""
    meta = {"name": "web", "namespace": "ns", "annotations": {}, "labels": {}}
    locked = {"powerState": "PoweredOn", "migration": {"name": "m", "target": "h2"}}
    free = machine_fingerprint(meta, {"powerState": "PoweredOn"})
    assert machine_fingerprint(meta, locked) != free
    assert machine_fingerprint(meta, {"powerState": "PoweredOn"}) == free
