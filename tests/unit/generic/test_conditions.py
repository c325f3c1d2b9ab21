"""Conditions: lastTransitionTime moves only when status changes; others' conditions survive."""

from __future__ import annotations

from generic.conditions import DesiredCondition, find_condition, merge_conditions


def _ready(status: str, reason: str = "R", message: str = "m") -> DesiredCondition:
    return DesiredCondition("Ready", status, reason, message)


def test_new_condition_gets_now() -> None:
    merged = merge_conditions(None, [_ready("True")], generation=3, now="T1")
    assert merged == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "R",
            "message": "m",
            "lastTransitionTime": "T1",
            "observedGeneration": 3,
        }
    ]


def test_time_kept_when_only_reason_or_message_change() -> None:
    first = merge_conditions([], [_ready("False", "A", "a")], generation=1, now="T1")
    second = merge_conditions(first, [_ready("False", "B", "b")], generation=2, now="T2")
    assert second[0]["lastTransitionTime"] == "T1"
    assert second[0]["reason"] == "B"
    assert second[0]["observedGeneration"] == 2


def test_time_moves_when_status_changes() -> None:
    first = merge_conditions([], [_ready("False")], generation=None, now="T1")
    second = merge_conditions(first, [_ready("True")], generation=None, now="T2")
    assert second[0]["lastTransitionTime"] == "T2"
    assert "observedGeneration" not in second[0]


def test_owned_conditions_not_desired_are_dropped_and_foreign_ones_kept() -> None:
    current = [
        {"type": "UpToDate", "status": "True", "lastTransitionTime": "T0"},
        {"type": "example.com/Backup", "status": "True", "lastTransitionTime": "T0"},
        "garbage",
    ]
    merged = merge_conditions(current, [_ready("True")], generation=None, now="T1")
    assert [m["type"] for m in merged] == ["example.com/Backup", "Ready"]


def test_find_condition_tolerates_garbage() -> None:
    assert find_condition("nope", "Ready") is None
    assert find_condition([1, {"type": "Ready"}], "Ready") == {"type": "Ready"}
