"""Sharing a machine's console: the seat rules (viewers, take-over), what a request asks for,
the fan-out's queue decisions, the replay ring and the idle timeouts (console/sharing.py,
console/sessions.py)."""

from __future__ import annotations

import pytest

from libvirt_provider import constants as c
from libvirt_provider.console.audit import taken_over
from libvirt_provider.console.auth import Refusal
from libvirt_provider.console.client import session_query
from libvirt_provider.console.routes import ConsoleRoute, ConsoleTarget, console_target
from libvirt_provider.console.sessions import VIEWER, WRITER, SessionRegistry, WriterBusyError
from libvirt_provider.console.sharing import (
    ConsoleOptions,
    OutputDecision,
    ReplayRing,
    console_options,
    idle_expired,
    logs_target,
    on_output,
    ping_due,
)

PATH = "/apis/g/v1alpha1/namespaces/a/libvirtmachines/vm/console"


def test_viewers_sit_beside_the_writer_and_never_conflict() -> None:
    registry = SessionRegistry()
    writer, _ = registry.take_writer("a", "vm", "alice")
    one = registry.add_viewer("a", "vm", "bob")
    two = registry.add_viewer("a", "vm", "bob")
    assert one.role == two.role == VIEWER
    assert writer.role == WRITER
    assert registry.viewers("a", "vm") == [one, two]
    with pytest.raises(WriterBusyError, match=r"alice.*--viewer.*--force"):
        registry.take_writer("a", "vm", "carol")
    assert registry.release(one)
    assert not registry.release(one)
    assert registry.viewers("a", "vm") == [two]
    assert registry.release(two)
    assert registry.viewers("a", "vm") == []
    assert registry.writers() == [writer]


def test_a_take_over_hands_back_the_displaced_seat_which_is_then_released_for_nothing() -> None:
    registry = SessionRegistry()
    first, _ = registry.take_writer("a", "vm", "alice")
    second, displaced = registry.take_writer("a", "vm", "bob", force=True)
    assert displaced == first
    assert registry.writers() == [second]
    # The displaced session ends later and gives back a seat it no longer holds.
    assert not registry.release(first)
    assert registry.writers() == [second]
    # Forcing a free seat displaces nobody.
    _, nobody = registry.take_writer("a", "other", "bob", force=True)
    assert nobody is None


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ConsoleOptions()),
        ("?viewer=true", ConsoleOptions(viewer=True)),
        ("?force=1", ConsoleOptions(force=True)),
        ("?logs=true&follow=true", ConsoleOptions(logs=True, follow=True)),
        ("?viewer=false", ConsoleOptions()),
        ("?viewer", ConsoleOptions(viewer=True)),
    ],
)
def test_a_request_says_what_it_wants_in_its_query(query: str, expected: ConsoleOptions) -> None:
    assert console_options(PATH + query) == expected


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("?viewer=true&force=true", "viewer and force"),
        ("?logs=true&force=true", "logs and force"),
        ("?follow=true", "follow goes with logs"),
        ("?shell=true", "unknown console parameter 'shell'"),
        ("?viewer=maybe", "takes true or false"),
    ],
)
def test_contradictions_and_unknown_parameters_are_a_bad_request(query: str, words: str) -> None:
    found = console_options(PATH + query)
    assert isinstance(found, Refusal)
    assert found.code == 400
    assert words in found.message


def test_the_plugins_query_is_what_the_server_reads() -> None:
    for viewer, force, logs, follow in [
        (False, False, False, False),
        (True, False, False, False),
        (False, True, False, False),
        (False, False, True, True),
    ]:
        query = session_query(viewer=viewer, force=force, logs=logs, follow=follow)
        assert console_options(PATH + query) == ConsoleOptions(viewer, force, logs, follow)
    assert session_query() == ""


def test_logs_follow_watches_as_a_viewer() -> None:
    assert ConsoleOptions(logs=True, follow=True).role == VIEWER
    assert ConsoleOptions(viewer=True).role == VIEWER
    assert ConsoleOptions(force=True).role == WRITER


def test_the_writers_bytes_are_never_dropped_it_pauses_the_guest_instead() -> None:
    limits = {"max_chunks": 4, "viewer_backlog": 100}
    assert on_output(WRITER, 3, 10**9, **limits) is OutputDecision.QUEUE
    assert on_output(WRITER, 4, 10, **limits) is OutputDecision.PAUSE
    assert on_output(WRITER, 400, 10**9, **limits) is OutputDecision.PAUSE


def test_a_slow_viewer_is_cut_off_and_never_pauses_the_guest() -> None:
    limits = {"max_chunks": 4, "viewer_backlog": 100}
    assert on_output(VIEWER, 400, 100, **limits) is OutputDecision.QUEUE
    assert on_output(VIEWER, 1, 101, **limits) is OutputDecision.CUT


def test_the_replay_ring_keeps_the_last_bytes() -> None:
    ring = ReplayRing(8, b"0123")
    ring.append(b"4567")
    assert ring.contents() == b"01234567"
    ring.append(b"89")
    assert ring.contents() == b"23456789"
    assert len(ring) == 8
    ring.append(b"abcdefghij")
    assert ring.contents() == b"cdefghij"
    ring.append(b"")
    assert ring.contents() == b"cdefghij"
    for byte in b"klm":
        ring.append(bytes([byte]))
    assert ring.contents() == b"fghijklm"
    assert ReplayRing(0, b"abc").contents() == b""
    assert ReplayRing(4, b"abcdef").contents() == b"cdef"


def test_idle_timeouts_per_role_and_zero_is_never() -> None:
    limits = {"writer_limit": 60.0, "viewer_limit": 0.0}
    assert not idle_expired(WRITER, 59.9, **limits)
    assert idle_expired(WRITER, 60.0, **limits)
    assert not idle_expired(VIEWER, 10**6, **limits)
    assert idle_expired(VIEWER, 5, writer_limit=0, viewer_limit=5)
    assert not idle_expired(WRITER, 10**6, writer_limit=0, viewer_limit=5)
    assert c.CONSOLE_VIEWER_IDLE_SECONDS == 0  # off by default for viewers


def test_a_take_over_leaves_an_event_naming_both() -> None:
    reason, message = taken_over("bob", "alice")
    assert reason == c.EVENT_CONSOLE_TAKEN_OVER
    assert message.startswith("bob took over the serial console from alice")


def _machine(power: str | None, *, built: bool = True) -> dict[str, object]:
    return {
        "metadata": {"uid": "u-1"},
        "spec": {"host": "h1"},
        "status": {
            "powerState": power,
            "providerMetadata": {"domainUUID": "u-1"} if built else {},
        },
    }


def test_a_log_is_read_whatever_the_power_state_but_only_where_a_domain_was_built() -> None:
    route = ConsoleRoute("team-a", "vm1", "console")
    served = frozenset({"h1"})
    for power in ("PoweredOff", None, "PoweredOn"):
        assert logs_target(route, _machine(power), served) == ConsoleTarget("h1", "u-1")
    # A powered-off machine's console itself stays a conflict.
    assert isinstance(console_target(route, _machine("PoweredOff"), served), Refusal)
    for machine, code in [
        (None, 404),
        (_machine("PoweredOff", built=False), 409),
    ]:
        found = logs_target(route, machine, served)
        assert isinstance(found, Refusal)
        assert found.code == code
    elsewhere = logs_target(route, _machine("PoweredOff"), frozenset({"h2"}))
    assert isinstance(elsewhere, Refusal)
    assert elsewhere.code == 503


def test_a_seat_taken_over_is_no_longer_held() -> None:
    registry = SessionRegistry()
    first, _ = registry.take_writer("a", "vm", "alice")
    viewer = registry.add_viewer("a", "vm", "carol")
    assert registry.holds(first)
    assert registry.holds(viewer)
    second, _ = registry.take_writer("a", "vm", "bob", force=True)
    assert not registry.holds(first)
    assert registry.holds(second)
    registry.release(viewer)
    assert not registry.holds(viewer)


def test_a_session_pings_every_ten_seconds_and_every_second_while_input_flows() -> None:
    def due(since_ping: float, since_input: float) -> bool:
        return ping_due(
            since_ping,
            since_input,
            idle_every=c.CONSOLE_PING_SECONDS,
            busy_every=c.CONSOLE_BUSY_PING_SECONDS,
        )

    assert not due(9.9, 60)
    assert due(10, 60)
    assert due(1.0, 0.2)  # a paste flowing: a client that died is found out within seconds
    assert not due(0.5, 0.2)
    assert not due(1.5, 5)  # typing paused: back to the idle pace
