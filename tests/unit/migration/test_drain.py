"""The drain's pure core: the plan first, then moves within bounds, and an end for each case."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.migration.drain import (
    Abort,
    CreateMigration,
    DrainPass,
    DrainRequest,
    MachineOnHost,
    Move,
    PowerOff,
    Target,
    drain_pass,
    migration_name,
)

DRAIN = DrainRequest()
NOW = "2026-12-04T19:00:00Z"
GEN = 7


def _to_h2(_machine: MachineOnHost) -> Target:
    return Target("h2")


def _nowhere(_machine: MachineOnHost) -> Target:
    return Target(None, "no host can take the machine: h2: cordoned")


def run(
    *,
    machines: Sequence[MachineOnHost],
    previous: dict[str, Any] | None = None,
    moves: Sequence[Move] = (),
    request: DrainRequest | None = DRAIN,
    choose: Any = _to_h2,
) -> DrainPass:
    return drain_pass(
        host="h1",
        request=request,
        previous=previous,
        machines=machines,
        moves=moves,
        choose=choose,
        generation=GEN,
        now=NOW,
    )


def entry(result: DrainPass, name: str) -> dict[str, Any]:
    assert result.status is not None
    return next(m for m in result.status["machines"] if m["name"] == name)


A = MachineOnHost("ns", "a")
B = MachineOnHost("ns", "b")


class TestThePlanComesFirst:
    def test_a_new_drain_publishes_the_plan_and_moves_nothing(self) -> None:
        result = run(machines=[A, B])
        assert result.status is not None
        assert result.status["phase"] == c.DRAIN_PHASE_PLANNING
        assert result.status["id"] == GEN
        assert result.actions == []
        assert entry(result, "a")["target"] == "h2"
        assert entry(result, "a")["state"] == c.DRAIN_MACHINE_PENDING
        assert result.status["message"] == "plan: 2 of 2 to migrate"
        assert result.condition == ("False", c.DRAIN_REASON_PLANNING, "plan: 2 of 2 to migrate")
        assert [e.reason for e in result.events] == [c.DRAIN_REASON_PLANNING]

    def test_the_next_pass_creates_the_migrations_named_for_the_drain(self) -> None:
        first = run(machines=[A, B])
        second = run(machines=[A, B], previous=first.status)
        assert second.actions == [
            CreateMigration("ns", "drain-7-1-a", "a"),
            CreateMigration("ns", "drain-7-1-b", "b"),
        ]
        assert second.status is not None
        assert second.status["phase"] == c.DRAIN_PHASE_DRAINING
        assert second.status["message"] == "0 of 2 moved, 2 migrating"
        assert entry(second, "a")["migration"] == "drain-7-1-a"

    def test_a_dry_run_only_publishes_the_plan_on_every_pass(self) -> None:
        first = run(machines=[A], request=DrainRequest(dry_run=True))
        again = run(machines=[A], previous=first.status, request=DrainRequest(dry_run=True))
        for result in (first, again):
            assert result.status is not None
            assert result.status["phase"] == c.DRAIN_PHASE_PLANNED
            assert result.actions == []
        assert again.events == []
        assert again.condition is not None
        assert again.condition[1] == c.DRAIN_REASON_DRY_RUN

    def test_leaving_the_dry_run_starts_moving(self) -> None:
        plan = run(machines=[A], request=DrainRequest(dry_run=True))
        result = run(machines=[A], previous=plan.status)
        assert result.actions == [CreateMigration("ns", "drain-7-1-a", "a")]

    def test_no_drain_asked_and_none_recorded_does_nothing(self) -> None:
        result = run(machines=[A], request=None)
        assert result == DrainPass(status=None, condition=None)


def _draining(machines: Sequence[MachineOnHost], choose: Any = _to_h2) -> dict[str, Any]:
    first = run(machines=machines, choose=choose)
    assert first.status is not None
    return first.status


class TestStrategies:
    def test_power_off_powers_it_off_and_leaves_it(self) -> None:
        m = MachineOnHost("ns", "p", strategy=c.EVICTION_POWER_OFF)
        result = run(machines=[m], previous=_draining([m]))
        assert result.actions == [PowerOff("ns", "p")]
        assert entry(result, "p")["state"] == c.DRAIN_MACHINE_POWERING_OFF
        assert [e.reason for e in result.events] == [
            c.EVENT_DRAIN_POWER_OFF,
            c.DRAIN_REASON_DRAINING,
        ]
        off = MachineOnHost("ns", "p", strategy=c.EVICTION_POWER_OFF, powered_off=True)
        done = run(machines=[off], previous=result.status)
        assert done.actions == []
        assert done.status is not None
        assert done.status["phase"] == c.DRAIN_PHASE_DRAINED
        assert done.condition == ("True", c.DRAIN_REASON_DRAINED, "0 of 1 moved, 1 powered off")

    def test_none_blocks_the_drain_and_the_plan_says_so(self) -> None:
        m = MachineOnHost("ns", "pinned", strategy=c.EVICTION_NONE)
        plan = run(machines=[m, A])
        assert entry(plan, "pinned")["state"] == c.DRAIN_MACHINE_BLOCKED
        assert "evictionStrategy None" in entry(plan, "pinned")["reason"]
        assert c.EVENT_DRAIN_MACHINE_BLOCKED in [e.reason for e in plan.events]
        moving = run(machines=[m, A], previous=plan.status)
        done = run(
            machines=[m],
            previous=moving.status,
            moves=[Move("ns", "drain-7-1-a", c.MIGRATION_PHASE_SUCCEEDED, target="h2")],
        )
        assert done.status is not None
        assert done.status["phase"] == c.DRAIN_PHASE_BLOCKED
        assert done.status["message"] == (
            "1 of 2 moved, 1 blocked: ns/pinned (evictionStrategy None: it stays, and the host "
            "is not drained)"
        )
        assert done.condition is not None
        assert done.condition[:2] == ("False", "DrainBlocked")
        assert next(e for e in done.events if e.reason == c.DRAIN_REASON_BLOCKED).warning
        # Blocked once: no second Event for the same reason.
        assert c.EVENT_DRAIN_MACHINE_BLOCKED not in [e.reason for e in done.events]

    def test_a_stopped_machine_is_left_on_the_host(self) -> None:
        m = MachineOnHost("ns", "off", powered_off=True)
        result = run(machines=[m], previous=_draining([m]))
        assert entry(result, "off")["state"] == c.DRAIN_MACHINE_STOPPED
        assert result.status is not None
        assert result.status["phase"] == c.DRAIN_PHASE_DRAINED


class TestMoves:
    def test_a_machine_with_nowhere_to_go_is_blocked_with_the_reason(self) -> None:
        result = run(machines=[A], previous=_draining([A], _nowhere), choose=_nowhere)
        assert result.actions == []
        assert result.status is not None
        assert result.status["phase"] == c.DRAIN_PHASE_BLOCKED
        assert "h2: cordoned" in entry(result, "a")["reason"]

    def test_a_target_appearing_later_unblocks_it(self) -> None:
        blocked = run(machines=[A], previous=_draining([A], _nowhere), choose=_nowhere)
        result = run(machines=[A], previous=blocked.status)
        assert result.actions == [CreateMigration("ns", "drain-7-1-a", "a")]

    def test_a_running_migration_is_followed_and_a_waiting_one_counts_as_migrating(self) -> None:
        moves = [Move("ns", "drain-7-1-a", c.MIGRATION_PHASE_PENDING, message="waiting: ...")]
        result = run(machines=[A], previous=_draining([A]), moves=moves)
        assert result.actions == []
        assert entry(result, "a")["state"] == c.DRAIN_MACHINE_MIGRATING

    def test_a_moved_machine_leaves_the_host_and_the_drain_ends_drained(self) -> None:
        moves = [Move("ns", "drain-7-1-a", c.MIGRATION_PHASE_SUCCEEDED, target="h2")]
        status = run(machines=[A], previous=_draining([A])).status
        result = run(machines=[], previous=status, moves=moves)
        assert entry(result, "a")["state"] == c.DRAIN_MACHINE_MOVED
        assert result.status is not None
        assert result.status["phase"] == c.DRAIN_PHASE_DRAINED
        assert result.status["message"] == "1 of 1 moved"
        assert result.condition is not None
        assert result.condition[0] == "True"

    def test_a_machine_handed_over_before_its_migration_ended_is_still_migrating(self) -> None:
        """The source binds it to the target, the target records Succeeded after."""
        status = run(machines=[A], previous=_draining([A])).status
        handing = [Move("ns", "drain-7-1-a", c.MIGRATION_PHASE_MIGRATING, target="h2")]
        result = run(machines=[], previous=status, moves=handing)
        assert entry(result, "a")["state"] == c.DRAIN_MACHINE_MIGRATING
        assert result.status is not None
        assert result.status["phase"] == c.DRAIN_PHASE_DRAINING
        done = [Move("ns", "drain-7-1-a", c.MIGRATION_PHASE_SUCCEEDED, target="h2")]
        result = run(machines=[], previous=result.status, moves=done)
        assert entry(result, "a")["state"] == c.DRAIN_MACHINE_MOVED
        assert result.status is not None
        assert result.status["phase"] == c.DRAIN_PHASE_DRAINED

    def test_a_machine_gone_otherwise_does_not_hold_the_drain(self) -> None:
        status = run(machines=[A], previous=_draining([A])).status
        result = run(machines=[], previous=status)
        assert entry(result, "a")["state"] == c.DRAIN_MACHINE_GONE
        assert result.status is not None
        assert result.status["phase"] == c.DRAIN_PHASE_DRAINED

    def test_a_failed_move_is_tried_again(self) -> None:
        moves = [Move("ns", "drain-7-1-a", c.MIGRATION_PHASE_FAILED, "MigrationFailed", "boom")]
        result = run(machines=[A], previous=_draining([A]), moves=moves)
        assert result.actions == [CreateMigration("ns", "drain-7-2-a", "a")]
        assert entry(result, "a")["attempts"] == 1
        assert next(e.reason for e in result.events) == c.EVENT_DRAIN_RETRY

    def test_retries_are_bounded_then_the_drain_is_blocked_naming_the_last_failure(self) -> None:
        moves = [
            Move("ns", migration_name(GEN, n, "a"), c.MIGRATION_PHASE_FAILED, "NoProgress", "slow")
            for n in range(1, c.DRAIN_MAX_ATTEMPTS + 1)
        ]
        result = run(machines=[A], previous=_draining([A]), moves=moves)
        assert result.actions == []
        a = entry(result, "a")
        assert a["state"] == c.DRAIN_MACHINE_BLOCKED
        assert a["attempts"] == c.DRAIN_MAX_ATTEMPTS
        assert a["reason"] == "3 migrations failed, the last NoProgress: slow"
        assert result.status is not None
        assert result.status["phase"] == c.DRAIN_PHASE_BLOCKED

    def test_a_blocked_machine_stays_blocked_on_the_passes_after(self) -> None:
        """The pass after the one that gave up starts from the entry's attempts: it must not
        take the missing next attempt for a move still to make (seen in a CI run: a fourth
        migration after the drain said Blocked)."""
        moves = [
            Move("ns", migration_name(GEN, n, "a"), c.MIGRATION_PHASE_FAILED, "NoProgress", "slow")
            for n in range(1, c.DRAIN_MAX_ATTEMPTS + 1)
        ]
        blocked = run(machines=[A], previous=_draining([A]), moves=moves).status
        again = run(machines=[A], previous=blocked, moves=moves)
        assert again.actions == []
        assert again.events == []
        a = entry(again, "a")
        assert a["state"] == c.DRAIN_MACHINE_BLOCKED
        assert a["attempts"] == c.DRAIN_MAX_ATTEMPTS
        assert a["reason"] == "3 migrations failed, the last NoProgress: slow"
        assert again.status is not None
        assert again.status["phase"] == c.DRAIN_PHASE_BLOCKED
        # Its failed migrations deleted meanwhile: the entry's count still holds it.
        assert run(machines=[A], previous=blocked, moves=[]).actions == []

    def test_a_machine_another_migration_holds_waits_for_its_end(self) -> None:
        held = MachineOnHost("ns", "a", locked_by="user-move")
        result = run(machines=[held], previous=_draining([A]))
        assert result.actions == []
        assert "user-move" in entry(result, "a")["reason"]
        assert result.status is not None
        assert result.status["phase"] == c.DRAIN_PHASE_DRAINING

    def test_a_machine_bound_later_joins_the_plan(self) -> None:
        result = run(machines=[A, B], previous=_draining([A]))
        assert CreateMigration("ns", "drain-7-1-b", "b") in result.actions


class TestCancel:
    def _running(self, on_cancel: str) -> dict[str, Any]:
        first = run(machines=[A], request=DrainRequest(on_cancel=on_cancel))
        second = run(machines=[A], previous=first.status, request=DrainRequest(on_cancel=on_cancel))
        assert second.status is not None
        return second.status

    def test_clearing_lets_running_migrations_finish_by_default(self) -> None:
        moves = [Move("ns", "drain-7-1-a", c.MIGRATION_PHASE_MIGRATING)]
        result = run(machines=[A], previous=self._running("Finish"), moves=moves, request=None)
        assert result.status is None
        assert result.condition is None
        assert result.actions == []
        assert result.events[0].reason == c.EVENT_DRAIN_CANCELLED
        assert "finish: ns/drain-7-1-a" in result.events[0].message

    def test_clearing_with_abort_deletes_the_running_migrations(self) -> None:
        moves = [
            Move("ns", "drain-7-1-a", c.MIGRATION_PHASE_MIGRATING),
            Move("ns", "drain-7-1-b", c.MIGRATION_PHASE_SUCCEEDED),
        ]
        result = run(machines=[A], previous=self._running("Abort"), moves=moves, request=None)
        assert result.actions == [Abort("ns", "drain-7-1-a")]
        assert "aborted: ns/drain-7-1-a" in result.events[0].message

    def test_clearing_a_finished_drain_only_says_so(self) -> None:
        done = run(
            machines=[],
            previous=self._running("Abort"),
            moves=[Move("ns", "drain-7-1-a", c.MIGRATION_PHASE_SUCCEEDED)],
        )
        result = run(machines=[], previous=done.status, request=None)
        assert result.actions == []
        assert [e.reason for e in result.events] == [c.EVENT_DRAIN_CLEARED]


def test_a_long_machine_name_still_gives_a_valid_migration_name() -> None:
    name = migration_name(12, 3, "m" * 253)
    assert len(name) <= 253
    assert name.startswith("drain-12-3-")
    assert name != migration_name(12, 2, "m" * 253)
