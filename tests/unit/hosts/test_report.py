"""What placement says on a machine it does not place: reason, message, conditions, Events."""

from __future__ import annotations

from libvirt_provider.hosts.placement import Decision
from libvirt_provider.hosts.report import (
    STARTUP_GRACE_SECONDS,
    Event,
    Report,
    Reported,
    conditions_patch,
    placed_events,
    startup_grace,
    unplaced_report,
)
from libvirt_provider.resolve.context import Problem

NOBODY = Decision(None, message="0/2 hosts fit: 2 insufficient memory (needs 4Gi)")
T0 = "2026-12-02T10:00:00Z"
T1 = "2026-12-02T10:05:00Z"


class TestUnplacedReport:
    def test_a_spec_wrong_on_every_host_says_what_is_wrong_with_it(self) -> None:
        problems = (
            Problem("ReferenceNotFound", "spec.instanceType", "class big not found"),
            Problem("InvalidSpec", "spec.bootDisk", "too small"),
        )
        assert unplaced_report(problems, NOBODY, term_age=0.0) == Report(
            "ReferenceNotFound", "spec.instanceType: class big not found; spec.bootDisk: too small"
        )

    def test_no_host_is_not_news_in_the_first_seconds_of_a_term(self) -> None:
        assert unplaced_report((), NOBODY, term_age=STARTUP_GRACE_SECONDS - 0.1) is None

    def test_then_it_waits_for_capacity_with_placements_message(self) -> None:
        assert unplaced_report((), NOBODY, term_age=STARTUP_GRACE_SECONDS) == Report(
            "WaitingForCapacity", NOBODY.message
        )


class TestConditionsPatch:
    WAIT = Report("WaitingForCapacity", "0/1 hosts fit: 1 cordoned")

    def test_both_conditions_say_the_report(self) -> None:
        patch = conditions_patch({}, 3, "False", self.WAIT, now=T0)
        assert patch is not None
        by_type = {c["type"]: c for c in patch["conditions"]}
        assert set(by_type) == {"InfrastructureReady", "UpToDate"}
        for cond in by_type.values():
            assert cond["status"] == "False"
            assert cond["reason"] == "WaitingForCapacity"
            assert cond["message"] == self.WAIT.message
            assert cond["observedGeneration"] == 3
            assert cond["lastTransitionTime"] == T0

    def test_nothing_to_write_when_the_status_says_so_already(self) -> None:
        patch = conditions_patch({}, 3, "False", self.WAIT, now=T0)
        assert patch is not None
        assert conditions_patch(patch, 3, "False", self.WAIT, now=T1) is None

    def test_a_new_message_keeps_the_transition_time_and_other_fields(self) -> None:
        status = conditions_patch({"phase": "x"}, 3, "False", self.WAIT, now=T0)
        assert status is not None
        status = {"phase": "x", **status}
        other = Report("WaitingForCapacity", "0/2 hosts fit: 2 cordoned")
        patch = conditions_patch(status, 3, "False", other, now=T1)
        assert patch is not None
        assert "phase" not in patch
        ready = next(c for c in patch["conditions"] if c["type"] == "InfrastructureReady")
        assert ready["message"] == other.message
        assert ready["lastTransitionTime"] == T0

    def test_host_not_ready_is_unknown_and_a_non_integer_generation_is_left_out(self) -> None:
        lost = Report("HostNotReady", "host kvm-a has not renewed ...")
        patch = conditions_patch({}, "7", "Unknown", lost, now=T0)
        assert patch is not None
        for cond in patch["conditions"]:
            assert cond["status"] == "Unknown"
            assert "observedGeneration" not in cond


class TestReported:
    def test_an_event_once_per_distinct_message(self) -> None:
        reported = Reported()
        assert reported.is_news("ns/a", "one")
        assert not reported.is_news("ns/a", "one")
        assert reported.is_news("ns/b", "one")
        assert reported.is_news("ns/a", "two")
        assert reported.is_news("ns/a", "one")

    def test_a_placed_or_deleted_machine_is_forgotten(self) -> None:
        reported = Reported()
        reported.is_news("ns/a", "one")
        reported.is_news("ns/b", "one")
        reported.forget("ns/a")
        assert reported.is_news("ns/a", "one")
        reported.keep_only({"ns/a"})
        assert reported.is_news("ns/b", "one")


class TestPlacedEvents:
    def test_placed(self) -> None:
        assert placed_events("kvm-a", spread_honoured=True, group=("ns", "db")) == (
            Event("Placed", "placed on host kvm-a"),
        )

    def test_a_spread_group_not_honoured_is_a_warning_beside_it(self) -> None:
        events = placed_events("kvm-a", spread_honoured=False, group=("ns", "db"))
        assert events == (
            Event("Placed", "placed on host kvm-a"),
            Event(
                "SpreadNotHonoured",
                "spread group 'db' already has a machine on every host (or zone) that fits; "
                "placed on kvm-a beside one",
                warning=True,
            ),
        )


def test_the_startup_grace_is_one_and_a_half_heartbeats() -> None:
    assert startup_grace(10.0) == STARTUP_GRACE_SECONDS
    assert unplaced_report((), NOBODY, term_age=2.9, grace=startup_grace(2.0)) is None
    assert unplaced_report((), NOBODY, term_age=3.0, grace=startup_grace(2.0)) is not None
