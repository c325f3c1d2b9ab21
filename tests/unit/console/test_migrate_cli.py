"""`kubectl vm migrate`'s pure parts: the migration it creates, the lines it prints while it
follows one, its exit code and what it says when the user stops waiting."""

from __future__ import annotations

from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.console.migrate import (
    ENDED_PHASES,
    cancel_hint,
    exit_code,
    final_line,
    human_bytes,
    migration_body,
    phase_of,
    progress_line,
)


def _migration(phase: str | None, **status: Any) -> dict[str, Any]:
    if phase is not None:
        status["phase"] = phase
    return {"metadata": {"name": "web-abcde"}, "status": status}


def _condition(reason: str, message: str = "") -> list[dict[str, str]]:
    return [
        {"type": c.MIGRATION_CONDITION_SUCCEEDED, "status": "False", "reason": reason,
         "message": message}
    ]  # fmt: skip


def test_the_body_names_the_machine_and_the_target_and_lets_the_server_name_it() -> None:
    body = migration_body("team-a", "web", "h2")
    assert body == {
        "apiVersion": f"{c.GROUP}/{c.VERSION}",
        "kind": c.MIGRATION_KIND,
        "metadata": {"generateName": "web-", "namespace": "team-a"},
        "spec": {"machineName": "web", "targetHost": "h2"},
    }


def test_without_a_target_the_spec_leaves_the_choice_to_the_source() -> None:
    assert migration_body("ns", "web", None)["spec"] == {"machineName": "web"}


def test_a_long_machine_name_leaves_room_for_the_generated_suffix() -> None:
    prefix = migration_body("ns", "a" * 253, None)["metadata"]["generateName"]
    assert prefix.endswith("-")
    assert len(prefix) + 5 <= 253


def test_bytes_read_as_binary_units() -> None:
    assert human_bytes(0) == "0 B"
    assert human_bytes(1023) == "1023 B"
    assert human_bytes(8 * 1024 * 1024) == "8.0 MiB"
    assert human_bytes(269230080) == "256.8 MiB"
    assert human_bytes(3 * 1024**4) == "3072.0 GiB"


def test_a_fresh_migration_is_pending() -> None:
    assert phase_of({"metadata": {}}) == c.MIGRATION_PHASE_PENDING
    assert progress_line({"metadata": {}}) == "Pending"


def test_the_progress_line_shows_the_hosts_and_the_reason_before_the_copy() -> None:
    obj = _migration(
        c.MIGRATION_PHASE_PREPARING,
        source="h1",
        target="h2",
        conditions=_condition(c.MIGRATION_REASON_WAITING_FOR_IMAGE),
    )
    assert progress_line(obj) == "Preparing h1 -> h2 (WaitingForImage)"


def test_the_progress_line_shows_the_bytes_left_while_the_copy_runs() -> None:
    obj = _migration(
        c.MIGRATION_PHASE_MIGRATING,
        source="h1",
        target="h2",
        progress={
            "memoryTotal": 256 * 1024 * 1024,
            "memoryRemaining": 64 * 1024 * 1024,
            "diskTotal": 8 * 1024 * 1024,
            "diskRemaining": 0,
            "iterations": 2,
            "elapsedMilliseconds": 3150,
        },
    )
    assert progress_line(obj) == (
        "Migrating h1 -> h2: memory 64.0 MiB of 256.0 MiB left, disk 0 B of 8.0 MiB left, "
        "pass 2, 3.1 s"
    )


def test_a_copy_without_figures_yet_shows_its_reason() -> None:
    obj = _migration(c.MIGRATION_PHASE_MIGRATING, target="h2", conditions=_condition("Migrating"))
    assert progress_line(obj) == "Migrating -> h2 (Migrating)"


def test_the_final_line_of_a_success_gives_libvirts_downtime_and_elapsed_time() -> None:
    obj = _migration(
        c.MIGRATION_PHASE_SUCCEEDED,
        source="h1",
        target="h2",
        result={"downtimeMilliseconds": 151, "elapsedMilliseconds": 4412},
    )
    assert final_line(obj) == "Succeeded h1 -> h2: downtime 151 ms, elapsed 4.4 s"
    assert exit_code(phase_of(obj)) == 0


def test_the_final_line_of_a_failure_gives_the_reason_and_message() -> None:
    obj = _migration(
        c.MIGRATION_PHASE_FAILED,
        conditions=_condition(c.MIGRATION_REASON_TARGET_CORDONED, "host h2 is cordoned"),
    )
    assert final_line(obj) == "Failed: TargetCordoned: host h2 is cordoned"
    assert exit_code(phase_of(obj)) == 1


def test_only_success_exits_zero() -> None:
    assert {
        c.MIGRATION_PHASE_SUCCEEDED, c.MIGRATION_PHASE_FAILED, c.MIGRATION_PHASE_CANCELLED
    } == ENDED_PHASES  # fmt: skip
    assert [exit_code(p) for p in sorted(ENDED_PHASES)] == [1, 1, 0]  # Cancelled, Failed, ...


def test_stopping_the_wait_says_the_migration_goes_on_and_how_to_cancel_it() -> None:
    hint = cancel_hint("team-a", "web-abcde")
    assert "goes on" in hint
    assert "kubectl delete lvmig web-abcde -n team-a" in hint


def test_figures_libvirt_has_not_started_yet_are_left_out() -> None:
    """Before the memory pass libvirt reports 0 of 0 bytes and pass 0: only the time shows."""
    obj = _migration(
        c.MIGRATION_PHASE_MIGRATING,
        source="h1",
        target="h0",
        progress={
            "memoryTotal": 0,
            "memoryRemaining": 0,
            "diskTotal": 0,
            "diskRemaining": 0,
            "iterations": 0,
            "elapsedMilliseconds": 1000,
        },
    )
    assert progress_line(obj) == "Migrating h1 -> h0: 1.0 s"
