"""The power state machine: every libvirt state is mapped, and each mode behaves as documented."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from generic.constants import (
    POWER_OFF_HARD,
    POWER_OFF_SOFT,
    POWER_OFF_TRY_SOFT,
    POWERED_OFF,
    POWERED_ON,
    SUSPENDED,
)
from libvirt_provider.driver.types import DomainState, DomainStatus
from libvirt_provider.machine.power import (
    PAUSED,
    PowerAction,
    decide_power,
    is_settled,
    observed_power_state,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TIMEOUT = timedelta(seconds=60)


def status(state: DomainState, *, saved: bool = False) -> DomainStatus:
    return DomainStatus(state=state, reason=0, has_managed_save=saved)


def decide(
    desired: str,
    state: DomainState,
    *,
    mode: str = POWER_OFF_TRY_SOFT,
    saved: bool = False,
    since: timedelta | None = None,
    last: timedelta | None = None,
) -> tuple[PowerAction, bool, str | None]:
    now = T0 + timedelta(hours=1)
    d = decide_power(
        desired=desired,
        mode=mode,
        status=status(state, saved=saved),
        now=now,
        graceful_since=None if since is None else now - since,
        last_graceful_request=None if last is None else now - last,
        timeout=TIMEOUT,
    )
    return d.action, d.settled, d.problem


class TestObservedPowerState:
    @pytest.mark.parametrize(
        ("state", "saved", "expected"),
        [
            (DomainState.RUNNING, False, POWERED_ON),
            (DomainState.BLOCKED, False, POWERED_ON),
            (DomainState.PAUSED, False, PAUSED),
            (DomainState.SHUTOFF, False, POWERED_OFF),
            (DomainState.SHUTOFF, True, SUSPENDED),
            (DomainState.PMSUSPENDED, False, SUSPENDED),
            (DomainState.CRASHED, False, "Crashed"),
            (DomainState.SHUTTING_DOWN, False, None),
            (DomainState.NOSTATE, False, None),
        ],
    )
    def test_each_state_maps_explicitly(
        self, state: DomainState, saved: bool, expected: str | None
    ) -> None:
        assert observed_power_state(status(state, saved=saved)) == expected

    def test_paused_is_not_off(self) -> None:
        assert observed_power_state(status(DomainState.PAUSED)) != POWERED_OFF

    def test_no_domain_reports_nothing(self) -> None:
        assert observed_power_state(None) is None


@pytest.mark.parametrize("desired", [POWERED_ON, POWERED_OFF, SUSPENDED])
@pytest.mark.parametrize("mode", [POWER_OFF_HARD, POWER_OFF_SOFT, POWER_OFF_TRY_SOFT])
@pytest.mark.parametrize("state", list(DomainState))
def test_every_combination_has_a_decision(desired: str, mode: str, state: DomainState) -> None:
    action, settled, _ = decide(desired, state, mode=mode)
    assert isinstance(action, PowerAction)
    if settled:
        assert action is PowerAction.NONE


class TestPowerOn:
    @pytest.mark.parametrize(
        ("state", "action"),
        [
            (DomainState.SHUTOFF, PowerAction.START),
            (DomainState.PAUSED, PowerAction.RESUME),
            (DomainState.PMSUSPENDED, PowerAction.WAKE),
            (DomainState.CRASHED, PowerAction.DESTROY),
            (DomainState.SHUTTING_DOWN, PowerAction.NONE),
        ],
    )
    def test_moves_toward_running(self, state: DomainState, action: PowerAction) -> None:
        assert decide(POWERED_ON, state)[:2] == (action, False)

    def test_running_is_settled(self) -> None:
        assert decide(POWERED_ON, DomainState.RUNNING)[:2] == (PowerAction.NONE, True)

    def test_a_suspended_machine_is_restored_by_starting_it(self) -> None:
        assert decide(POWERED_ON, DomainState.SHUTOFF, saved=True)[0] is PowerAction.START


class TestPowerOff:
    def test_hard_destroys_at_once(self) -> None:
        assert decide(POWERED_OFF, DomainState.RUNNING, mode=POWER_OFF_HARD)[0] is (
            PowerAction.DESTROY
        )

    @pytest.mark.parametrize("mode", [POWER_OFF_SOFT, POWER_OFF_TRY_SOFT])
    def test_graceful_modes_press_the_power_button_first(self, mode: str) -> None:
        d = decide_power(
            desired=POWERED_OFF,
            mode=mode,
            status=status(DomainState.RUNNING),
            now=T0,
            graceful_since=None,
            last_graceful_request=None,
            timeout=TIMEOUT,
        )
        assert d.action is PowerAction.SHUTDOWN
        assert d.graceful_started

    def test_the_request_is_resent_until_the_timeout(self) -> None:
        second = timedelta(seconds=1)
        assert decide(POWERED_OFF, DomainState.RUNNING, since=30 * second, last=2 * second)[0] is (
            PowerAction.NONE
        )
        assert decide(POWERED_OFF, DomainState.RUNNING, since=30 * second, last=11 * second)[0] is (
            PowerAction.SHUTDOWN
        )

    def test_try_soft_forces_after_the_timeout(self) -> None:
        action, settled, _ = decide(
            POWERED_OFF, DomainState.RUNNING, since=TIMEOUT, last=timedelta(seconds=1)
        )
        assert (action, settled) == (PowerAction.DESTROY, False)

    def test_soft_reports_the_timeout_and_never_forces(self) -> None:
        action, settled, problem = decide(
            POWERED_OFF,
            DomainState.RUNNING,
            mode=POWER_OFF_SOFT,
            since=TIMEOUT + timedelta(seconds=5),
            last=timedelta(seconds=1),
        )
        assert action is PowerAction.NONE
        assert not settled
        assert problem is not None
        assert "65 s" in problem

    def test_soft_keeps_pressing_after_the_timeout(self) -> None:
        action, _, problem = decide(
            POWERED_OFF,
            DomainState.RUNNING,
            mode=POWER_OFF_SOFT,
            since=2 * TIMEOUT,
            last=timedelta(seconds=30),
        )
        assert action is PowerAction.SHUTDOWN
        assert problem is not None

    def test_a_paused_guest_cannot_be_asked(self) -> None:
        assert decide(POWERED_OFF, DomainState.PAUSED)[0] is PowerAction.DESTROY
        action, _, problem = decide(POWERED_OFF, DomainState.PAUSED, mode=POWER_OFF_SOFT)
        assert action is PowerAction.NONE
        assert problem is not None
        assert "paused" in problem

    def test_off_with_saved_memory_discards_it(self) -> None:
        assert decide(POWERED_OFF, DomainState.SHUTOFF, saved=True)[0] is (
            PowerAction.DISCARD_SAVED_STATE
        )

    def test_off_is_settled(self) -> None:
        assert decide(POWERED_OFF, DomainState.SHUTOFF)[:2] == (PowerAction.NONE, True)


class TestSuspend:
    @pytest.mark.parametrize("state", [DomainState.RUNNING, DomainState.PAUSED])
    def test_running_or_paused_machines_are_saved(self, state: DomainState) -> None:
        assert decide(SUSPENDED, state)[0] is PowerAction.MANAGED_SAVE

    def test_saved_is_settled(self) -> None:
        assert decide(SUSPENDED, DomainState.SHUTOFF, saved=True)[:2] == (PowerAction.NONE, True)

    def test_an_off_machine_stays_off_and_says_why(self) -> None:
        action, settled, problem = decide(SUSPENDED, DomainState.SHUTOFF)
        assert (action, settled) == (PowerAction.NONE, True)
        assert problem is not None


@pytest.mark.parametrize("desired", ["PoweredOn", "PoweredOff", "Suspended", "Rebooting"])
@pytest.mark.parametrize("mode", ["Hard", "Soft", "TrySoft"])
@pytest.mark.parametrize("saved", [False, True])
@pytest.mark.parametrize("state", list(DomainState))
def test_is_settled_agrees_with_every_decision(
    desired: str, mode: str, saved: bool, state: DomainState
) -> None:
    status = DomainStatus(state=state, reason=0, has_managed_save=saved)
    now = datetime(2026, 12, 1, tzinfo=UTC)
    for since in (None, now - timedelta(seconds=5), now - timedelta(hours=1)):
        decision = decide_power(
            desired=desired,
            mode=mode,
            status=status,
            now=now,
            graceful_since=since,
            last_graceful_request=since,
            timeout=timedelta(seconds=30),
        )
        assert decision.settled == is_settled(desired, status)


def test_a_guest_paused_by_a_disk_error_is_not_resumed_in_a_loop() -> None:
    paused = DomainStatus(
        state=DomainState.PAUSED, reason=0, has_managed_save=False, paused_by_io_error=True
    )
    decision = decide_power(
        desired=POWERED_ON,
        mode=POWER_OFF_TRY_SOFT,
        status=paused,
        now=T0,
        graceful_since=None,
        last_graceful_request=None,
        timeout=TIMEOUT,
    )
    assert decision.action is PowerAction.NONE
    assert not decision.settled
    assert decision.problem is not None
    assert "storage pool" in decision.problem
    # An ordinary pause is still resumed.
    assert decide(POWERED_ON, DomainState.PAUSED)[0] is PowerAction.RESUME
