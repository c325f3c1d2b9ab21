"""Remote hosts' console logs, the decisions (console/keeping.py): which machines get a keeper,
which lose their stream and which their files, the backoff, the rotation's arithmetic and what
`--logs` reads of a rotated log."""

from __future__ import annotations

from typing import Any

import pytest

from libvirt_provider import constants as c
from libvirt_provider.console.keeping import (
    KeeperPlan,
    KeeperState,
    KeptMachine,
    failures_after_end,
    fitting,
    kept_machine,
    log_files,
    plan,
    retry_delay,
    rotates,
    tail_ranges,
)
from libvirt_provider.naming import domain_name, legacy_domain_name

UID = "3b1c0f8e-0000-4000-8000-000000000001"


def _machine(power: str | None = "PoweredOn", **meta: Any) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if power is not None:
        status["powerState"] = power
    return {"metadata": {"namespace": "team-a", "name": "vm", "uid": UID, **meta}, "status": status}


def test_a_machine_is_kept_by_its_domain_and_runs_when_its_console_can_be_opened() -> None:
    kept = kept_machine(_machine())
    assert kept == KeptMachine("team-a", "vm", UID, domain_name("team-a", "vm", UID), True)
    assert kept is not None
    assert kept.key == ("team-a", "vm", UID)
    assert kept_machine(_machine("Paused")).running  # type: ignore[union-attr]
    for power in ("PoweredOff", "Crashed", None):
        assert not kept_machine(_machine(power)).running  # type: ignore[union-attr]
    # Being deleted: its stream goes (its files stay until it is gone).
    gone = kept_machine(_machine(deletionTimestamp="2026-01-01T00:00:00Z"))
    assert gone is not None
    assert not gone.running
    assert kept_machine({"metadata": {"namespace": "a", "name": "b"}}) is None


def test_a_machine_with_a_legacy_domain_name_is_kept_under_it() -> None:
    obj = _machine()
    obj["status"]["providerMetadata"] = {"domainName": legacy_domain_name("team-a", "vm")}
    assert kept_machine(obj).domain == legacy_domain_name("team-a", "vm")  # type: ignore[union-attr]
    # Any other recorded name is not believed (a status proves nothing).
    obj["status"]["providerMetadata"] = {"domainName": "someone-elses"}
    assert kept_machine(obj).domain == domain_name("team-a", "vm", UID)  # type: ignore[union-attr]


def _kept(name: str, running: bool = True) -> KeptMachine:
    return KeptMachine("ns", name, f"uid-{name}", f"dom-{name}", running)


def test_running_machines_of_served_hosts_get_a_stream_once() -> None:
    a, b, off = _kept("a"), _kept("b"), _kept("off", running=False)
    work = plan({"h1": [a, off], "h2": [b]}, {}, now=10.0)
    assert work == KeeperPlan(open=(("h1", a), ("h2", b)))
    held = {a.key: KeeperState("h1", a, open=True), b.key: KeeperState("h2", b, open=True)}
    assert plan({"h1": [a, off], "h2": [b]}, held, now=11.0) == KeeperPlan()


def test_a_failed_or_ended_stream_is_tried_again_only_after_its_backoff() -> None:
    a = _kept("a")
    held = {a.key: KeeperState("h1", a, open=False, retry_at=20.0)}
    assert plan({"h1": [a]}, held, now=19.9) == KeeperPlan()
    assert plan({"h1": [a]}, held, now=20.0) == KeeperPlan(open=(("h1", a),))


def test_a_machine_that_stops_loses_its_stream_and_keeps_its_files() -> None:
    a = _kept("a")
    stopped = _kept("a", running=False)
    held = {a.key: KeeperState("h1", a, open=True)}
    assert plan({"h1": [stopped]}, held, now=1.0) == KeeperPlan(close=(a.key,))
    # Closed already: nothing more, until it runs again.
    closed = {a.key: KeeperState("h1", a, open=False)}
    assert plan({"h1": [stopped]}, closed, now=1.0) == KeeperPlan()
    assert plan({"h1": [a]}, closed, now=1.0) == KeeperPlan(open=(("h1", a),))
    # Its stream ended as it stopped and a retry waits: cleared, so a start soon after is kept
    # from its first line rather than after the backoff.
    waiting = {a.key: KeeperState("h1", a, open=False, retry_at=50.0)}
    assert plan({"h1": [stopped]}, waiting, now=1.0) == KeeperPlan(close=(a.key,))


def test_a_deleted_machine_or_a_host_handed_back_is_forgotten_with_its_files() -> None:
    a, b = _kept("a"), _kept("b", running=False)
    held = {a.key: KeeperState("h1", a, open=True), b.key: KeeperState("h2", b, open=False)}
    # a deleted (gone from h1's machines), h2 no longer served.
    assert plan({"h1": []}, held, now=1.0) == KeeperPlan(forget=(a.key, b.key))
    # a now on another host (a migration): forgotten here, not kept twice.
    assert plan({"h3": [a]}, {a.key: held[a.key]}, now=1.0) == KeeperPlan(forget=(a.key,))


def test_the_backoff_doubles_up_to_its_cap_and_a_long_lived_stream_starts_it_again() -> None:
    first = c.CONSOLE_KEEPER_RETRY_SECONDS
    assert [retry_delay(n) for n in (0, 1, 2, 3)] == [first, first, 2 * first, 4 * first]
    assert retry_delay(1000) == c.CONSOLE_KEEPER_RETRY_MAX_SECONDS
    assert all(retry_delay(n) > 0 for n in range(100))
    assert failures_after_end(5, lived_seconds=c.CONSOLE_KEEPER_HEALTHY_SECONDS) == 1
    assert failures_after_end(5, lived_seconds=0.5) == 6


def test_rotation_arithmetic() -> None:
    assert log_files("/d/x.serial.log") == ["/d/x.serial.log.1", "/d/x.serial.log"]
    assert log_files("/d/x", rotated=2) == ["/d/x.2", "/d/x.1", "/d/x"]
    assert fitting(b"0123456789", 4) == b"6789"
    assert fitting(b"0123", 4) == b"0123"
    assert not rotates(0, 4, 4)
    assert not rotates(0, 10, 4)  # an empty file takes a (cut) chunk whatever its size
    assert not rotates(2, 2, 4)
    assert rotates(3, 2, 4)


@pytest.mark.parametrize(
    ("sizes", "max_bytes", "expected"),
    [
        ([0, 10], 4, [(1, 6, 4)]),
        ([0, 10], 100, [(1, 0, 10)]),
        ([8, 3], 5, [(0, 6, 2), (1, 0, 3)]),
        ([8, 3], 100, [(0, 0, 8), (1, 0, 3)]),
        ([8, 0], 5, [(0, 3, 5)]),
        ([8, 3], 0, []),
        ([0, 0], 5, []),
    ],
)
def test_logs_read_the_rotated_file_before_a_current_one_too_short(
    sizes: list[int], max_bytes: int, expected: list[tuple[int, int, int]]
) -> None:
    assert tail_ranges(sizes, max_bytes) == expected
