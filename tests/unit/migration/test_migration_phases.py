"""The migration's state machine: which daemon acts at each point, and with what step."""

from __future__ import annotations

import pytest

from libvirt_provider.driver.types import DomainState
from libvirt_provider.migration.phases import (
    Facts,
    Leftover,
    Role,
    Step,
    leftover,
    next_step,
    role_of,
    succeeded_condition,
)
from libvirt_provider.migration_api import MigrationPhase as P

S, T, N = Role.SOURCE, Role.TARGET, Role.NONE


def test_the_source_is_the_recorded_host_then_the_machines() -> None:
    assert role_of("a", machine_host="a", source=None, target=None) is S
    # After the hand-over the machine names the target, the migration still its source.
    assert role_of("a", machine_host="b", source="a", target="b") is S
    assert role_of("b", machine_host="b", source="a", target="b") is T
    assert role_of("c", machine_host="a", source="a", target="b") is N


@pytest.mark.parametrize(
    ("role", "facts", "step"),
    [
        (S, Facts(phase=None), Step.ACCEPT),
        (T, Facts(phase=None), Step.WAIT),
        # The source watches whether the target still serves while it prepares.
        (S, Facts(phase=P.PREPARING), Step.AWAIT_TARGET),
        (T, Facts(phase=P.PREPARING), Step.PREPARE),
        (T, Facts(phase=P.PREPARING, prepared=True), Step.WAIT),
        (S, Facts(phase=P.PREPARING, prepared=True), Step.MIGRATE),
        # A source restarted mid-copy looks again (the domain tells whether it left).
        (S, Facts(phase=P.MIGRATING, prepared=True), Step.MIGRATE),
        (T, Facts(phase=P.MIGRATING, prepared=True), Step.WAIT),
        (S, Facts(phase=P.MIGRATING, prepared=True, handed_over=True), Step.WAIT),
        (T, Facts(phase=P.MIGRATING, prepared=True, handed_over=True), Step.FINISH),
        (T, Facts(phase=P.SUCCEEDED, prepared=True, handed_over=True), Step.WAIT),
        (S, Facts(phase=P.SUCCEEDED, prepared=True, handed_over=True), Step.WAIT),
        (N, Facts(phase=P.PREPARING), Step.WAIT),
    ],
)
def test_a_successful_migration_passes_from_daemon_to_daemon(
    role: Role, facts: Facts, step: Step
) -> None:
    assert next_step(role, facts) is step


def test_a_failure_after_preparing_has_the_target_clean_up_then_the_source_release() -> None:
    failed = Facts(phase=P.FAILED, prepared=True)
    assert next_step(T, failed) is Step.CLEAN_TARGET
    assert next_step(S, failed) is Step.WAIT
    gone = Facts(phase=P.FAILED, prepared=True, deleting=True)
    # Deleted before the target cleaned: the finalizer waits for it, looking now and then
    # whether the target's host was given up.
    assert next_step(S, gone) is Step.AWAIT_CLEANUP
    cleaned = Facts(phase=P.FAILED, prepared=True, target_cleaned=True, deleting=True)
    assert next_step(S, cleaned) is Step.RELEASE
    assert next_step(T, cleaned) is Step.WAIT
    # The target's host deleted for good: nobody will clean, so the source lets go.
    lost = Facts(phase=P.FAILED, prepared=True, deleting=True, target_gone=True)
    assert next_step(S, lost) is Step.RELEASE
    # Not while the migration is kept: a failed one shows what is left where.
    assert next_step(S, Facts(phase=P.FAILED, prepared=True, target_gone=True)) is Step.WAIT


def test_deleting_a_running_migration_cancels_it_on_the_source() -> None:
    for phase in (None, P.PENDING, P.PREPARING):
        assert next_step(S, Facts(phase=phase, deleting=True)) is Step.CANCEL
        assert next_step(T, Facts(phase=phase, deleting=True)) is Step.WAIT
    cancelled = Facts(phase=P.CANCELLED, prepared=True, deleting=True)
    assert next_step(T, cancelled) is Step.CLEAN_TARGET


def test_deleting_one_already_handed_over_lets_the_target_finish() -> None:
    facts = Facts(phase=P.MIGRATING, prepared=True, handed_over=True, deleting=True)
    assert next_step(T, facts) is Step.FINISH
    assert next_step(S, facts) is Step.WAIT
    done = Facts(phase=P.SUCCEEDED, prepared=True, handed_over=True, deleting=True)
    assert next_step(S, done) is Step.RELEASE


def test_the_succeeded_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    first = succeeded_condition(
        None, status="False", reason="Pending", message="a", generation=1, now="t1"
    )
    assert first == [
        {
            "type": "Succeeded",
            "status": "False",
            "reason": "Pending",
            "message": "a",
            "lastTransitionTime": "t1",
            "observedGeneration": 1,
        }
    ]
    later = succeeded_condition(
        [*first, {"type": "Other"}],
        status="False",
        reason="Migrating",
        message="b",
        generation=None,
        now="t2",
    )
    assert later[0] == {"type": "Other"}
    assert (later[1]["reason"], later[1]["lastTransitionTime"]) == ("Migrating", "t1")
    done = succeeded_condition(
        later, status="True", reason="Migrated", message="c", generation=None, now="t3"
    )
    assert done[1]["lastTransitionTime"] == "t3"


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (None, Leftover.NONE),
        (DomainState.RUNNING, Leftover.KEEP),
        # qemu holds an incoming domain paused until the copy is complete.
        (DomainState.PAUSED, Leftover.REMOVE),
        (DomainState.SHUTOFF, Leftover.REMOVE),
        (DomainState.CRASHED, Leftover.REMOVE),
    ],
)
def test_the_target_keeps_only_a_running_domain_after_a_failed_migration(
    state: DomainState | None, expected: Leftover
) -> None:
    assert leftover(state) is expected
