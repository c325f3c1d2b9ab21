"""What refuses a migration before anything is copied, and the reason each gets."""

from __future__ import annotations

import dataclasses

import pytest

from libvirt_provider import constants as c
from libvirt_provider.migration.refusals import Request, TargetFacts, refusal

READY = TargetFacts(
    ready=True, cordoned=False, networks=frozenset({"lab"}), pools=frozenset({"pool"}), zone="z2"
)
OK = Request(
    migration="m",
    machine_host="a",
    target="b",
    target_facts=READY,
    running=True,
    power_state="PoweredOn",
    source_zone="z1",
    networks=frozenset({"lab"}),
    pools=frozenset({"pool"}),
)


def test_a_running_machine_to_a_ready_host_that_has_what_it_uses_goes() -> None:
    assert refusal(OK) is None
    # Its own lock is no refusal (the pass after accepting it reads the machine again).
    assert refusal(dataclasses.replace(OK, locked_by="m")) is None


@pytest.mark.parametrize(
    ("change", "reason", "words"),
    [
        ({"locked_by": "other"}, c.MIGRATION_REASON_ALREADY_MIGRATING, "migration 'other'"),
        ({"machine_host": None}, c.MIGRATION_REASON_MACHINE_NOT_BOUND, "no host yet"),
        ({"target": None}, c.MIGRATION_REASON_TARGET_REQUIRED, "none was chosen"),
        ({"target": "a"}, c.MIGRATION_REASON_SAME_HOST, "already runs on host 'a'"),
        (
            {"running": False, "power_state": "PoweredOff"},
            c.MIGRATION_REASON_MACHINE_NOT_RUNNING,
            "power state PoweredOff",
        ),
        ({"failure_domain": "a"}, c.MIGRATION_REASON_PINNED, "failureDomain 'a'"),
        ({"failure_domain": "z1"}, c.MIGRATION_REASON_PINNED, "failureDomain 'z1'"),
        ({"target_facts": None}, c.MIGRATION_REASON_TARGET_NOT_FOUND, "no LibvirtHost 'b'"),
        (
            {"target_facts": dataclasses.replace(READY, cordoned=True)},
            c.MIGRATION_REASON_TARGET_CORDONED,
            "cordoned",
        ),
        (
            {"target_facts": dataclasses.replace(READY, ready=False)},
            c.MIGRATION_REASON_TARGET_NOT_READY,
            "not Ready",
        ),
        (
            {"networks": frozenset({"lab", "dmz"})},
            c.MIGRATION_REASON_TARGET_UNSUITABLE,
            "network(s) dmz",
        ),
        ({"pools": frozenset({"fast"})}, c.MIGRATION_REASON_TARGET_UNSUITABLE, "pool(s) fast"),
        (
            {"target_migratable": False},
            c.MIGRATION_REASON_TARGET_NOT_MIGRATABLE,
            "--migration-uri",
        ),
    ],
)
def test_each_refusal_has_its_reason(change: dict[str, object], reason: str, words: str) -> None:
    found = refusal(dataclasses.replace(OK, **change))  # type: ignore[arg-type]
    assert found is not None
    assert found.reason == reason
    assert words in found.message


def test_a_failure_domain_that_is_a_zone_lets_the_machine_move_within_it() -> None:
    same_zone = dataclasses.replace(READY, zone="z1")
    assert refusal(dataclasses.replace(OK, failure_domain="z1", target_facts=same_zone)) is None
