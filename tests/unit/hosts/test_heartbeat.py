"""The heartbeat as placement judges it: freshness, the Lease listing's reuse, and when a stale
heartbeat declares a host's machines stranded (918b6a6: only once the API server has answered
the placer for a heartbeat grace). Every time is injected."""

from __future__ import annotations

import datetime as dt
from typing import Any

from libvirt_provider.hosts.heartbeat import (
    HEARTBEATS_FRESH_SECONDS,
    Answered,
    fresh,
    heartbeat_interval,
    host_not_ready,
    list_again,
    renewals,
    takeover_refused,
)
from libvirt_provider.hosts.placement import HostView
from libvirt_provider.hosts.report import Report

GRACE = 40.0
WALL = dt.datetime(2026, 12, 2, 10, 0, 0, tzinfo=dt.UTC)
STAYS = "the machine's state is unknown; it stays on its host and is not recreated elsewhere"
LOST = f"host kvm-a has not renewed its heartbeat for over 40 s: {STAYS}"


def ago(seconds: float) -> dt.datetime:
    return WALL - dt.timedelta(seconds=seconds)


def stamp(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def view(*, ready: bool = True, heartbeat_lost: bool = False) -> HostView:
    return HostView(
        name="kvm-a",
        labels={},
        ready=ready,
        unschedulable=False,
        cpus=8,
        memory=2**34,
        pools={},
        heartbeat_lost=heartbeat_lost,
    )


STALE = view(ready=False, heartbeat_lost=True)


def judge(host_view: HostView | None, **kw: Any) -> Report | None:
    args: dict[str, Any] = {
        "registered": True,
        "created": stamp(ago(3600)),
        "now": WALL,
        "answered": True,
        "conditions": [],
    }
    args.update(kw)
    return host_not_ready("kvm-a", host_view, **args)


class TestFreshness:
    def test_a_heartbeat_within_the_grace_is_fresh(self) -> None:
        assert fresh(ago(0), WALL)
        assert fresh(ago(GRACE), WALL)

    def test_an_older_one_or_none_is_not(self) -> None:
        assert not fresh(ago(GRACE + 1), WALL)
        assert not fresh(None, WALL)


class TestLeaseListing:
    def test_listed_at_first(self) -> None:
        assert list_again(None, set(), {"a"}, now=100.0)

    def test_a_recent_listing_serves_while_it_covers_every_host(self) -> None:
        assert not list_again(100.0, {"a", "b"}, {"a", "b"}, now=100.0 + 2.9)
        assert not list_again(100.0, {"a", "b"}, {"a"}, now=101.0)

    def test_listed_again_once_a_few_seconds_old(self) -> None:
        assert list_again(100.0, {"a"}, {"a"}, now=100.0 + HEARTBEATS_FRESH_SECONDS)

    def test_listed_again_when_a_host_appeared(self) -> None:
        assert list_again(100.0, {"a"}, {"a", "new"}, now=100.5)

    def test_renewals_by_the_host_label(self) -> None:
        label = "infrastructure.vm-api.io/host"
        beats = renewals(
            [
                ({label: "a"}, ago(5)),
                (None, ago(1)),  # no labels: not a host's heartbeat
                ({"other": "b"}, ago(1)),
                ({label: "c"}, None),  # never renewed
                ({label: "d"}, "2026-12-02T10:00:00Z"),  # not a time
            ]
        )
        assert beats == {"a": ago(5)}


class TestAnsweredForAGrace:
    def test_not_until_a_grace_has_passed_since_the_term_began(self) -> None:
        answered = Answered(since=1000.0)
        assert not answered.for_a_grace(1000.0)
        assert not answered.for_a_grace(1000.0 + GRACE - 0.1)
        assert answered.for_a_grace(1000.0 + GRACE)

    def test_a_failed_pass_starts_the_count_again(self) -> None:
        answered = Answered(since=1000.0)
        assert answered.for_a_grace(1100.0)
        answered.broken(1100.0)
        assert not answered.for_a_grace(1100.0 + GRACE - 1)
        assert answered.for_a_grace(1100.0 + GRACE)


class TestStranded:
    """918b6a6: a stale heartbeat keeps new machines off the host at once, but declares its
    machines stranded only once the API server has answered the placer for a grace."""

    def test_a_stale_heartbeat_is_not_judged_lost_before_the_api_server_answered_a_grace(
        self,
    ) -> None:
        assert judge(STALE, answered=False) is None

    def test_after_that_it_is_reported_host_not_ready(self) -> None:
        assert judge(STALE, answered=True) == Report("HostNotReady", LOST)

    def test_an_api_server_outage_delays_the_judgement_by_a_grace_from_its_end(self) -> None:
        # The term begins at 1000; the host's Lease is long stale throughout.
        answered = Answered(since=1000.0)

        def at(now: float) -> Report | None:
            return judge(STALE, answered=answered.for_a_grace(now))

        assert at(1010.0) is None  # the term is new: no host could renew meanwhile
        assert at(1040.0) == Report("HostNotReady", LOST)
        answered.broken(1050.0)  # a pass failed: the API server did not answer
        assert at(1060.0) is None
        assert at(1089.9) is None
        assert at(1090.0) == Report("HostNotReady", LOST)

    def test_a_ready_host_or_one_not_ready_for_libvirt_is_not_news(self) -> None:
        assert judge(view()) is None
        # Ready False with a fresh heartbeat (libvirtd unavailable): the host's daemon reports.
        assert judge(view(ready=False, heartbeat_lost=False)) is None

    def test_a_machine_already_saying_so_is_not_told_again(self) -> None:
        said = [{"type": "InfrastructureReady", "status": "Unknown", "reason": "HostNotReady"}]
        assert judge(STALE, conditions=said) is None
        other = [{"type": "InfrastructureReady", "status": "True", "reason": "Ready"}]
        assert judge(STALE, conditions=other) == Report("HostNotReady", LOST)

    def test_a_host_without_an_inventory_yet_is_waited_for(self) -> None:
        assert judge(None, registered=True) is None

    def test_a_host_with_no_libvirthost_is_reported_once_a_new_machine_had_a_grace(self) -> None:
        assert judge(None, registered=False, created=stamp(ago(GRACE))) is None
        assert judge(None, registered=False, created=None) is None
        assert judge(None, registered=False, created="yesterday") is None
        assert judge(None, registered=False, created=stamp(ago(GRACE + 1))) == Report(
            "HostNotReady",
            f"no LibvirtHost named kvm-a exists (its daemon never ran, or the host was "
            f"removed): {STAYS}",
        )


def test_a_lease_is_refused_only_while_another_holder_keeps_it_fresh() -> None:
    # A node named like a remote host does not take over that host's claim (issue 24, item 9).
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    recent = now - dt.timedelta(seconds=5)
    old = now - dt.timedelta(seconds=GRACE + 1)
    assert takeover_refused("h1", "h1", recent, 40, now) is None
    assert takeover_refused("h1", None, recent, 40, now) is None
    assert takeover_refused("h1", "", recent, 40, now) is None
    assert takeover_refused("h1", "replica-a", old, 40, now) is None
    assert takeover_refused("h1", "replica-a", None, 40, now) is None
    refused = takeover_refused("h1", "replica-a", recent, 40, now)
    assert refused is not None
    assert "held by replica-a, renewed 5 s ago" in refused
    # Its own duration counts; without one, the heartbeat grace.
    assert takeover_refused("h1", "replica-a", recent, 3, now) is None
    assert takeover_refused("h1", "replica-a", recent, None, now) is not None


class TestAShorterGrace:
    """--heartbeat-grace: the same rules against another grace (every daemon given the same)."""

    def test_freshness_follows_the_grace(self) -> None:
        assert fresh(ago(12), WALL, grace=12.0)
        assert not fresh(ago(12.5), WALL, grace=12.0)

    def test_the_term_answers_for_its_own_grace(self) -> None:
        answered = Answered(since=1000.0, grace=12.0)
        assert not answered.for_a_grace(1011.9)
        assert answered.for_a_grace(1012.0)

    def test_the_report_names_the_grace(self) -> None:
        said = judge(STALE, grace=12.0)
        assert said == Report(
            "HostNotReady", f"host kvm-a has not renewed its heartbeat for over 12 s: {STAYS}"
        )

    def test_a_missing_host_is_reported_a_grace_after_the_machine_was_made(self) -> None:
        assert judge(None, registered=False, created=stamp(ago(11)), grace=12.0) is None
        said = judge(None, registered=False, created=stamp(ago(13)), grace=12.0)
        assert said is not None
        assert said.reason == "HostNotReady"

    def test_a_lease_naming_no_duration_is_held_for_the_grace(self) -> None:
        assert takeover_refused("h", "other", ago(11), None, WALL, grace=12.0) is not None
        assert takeover_refused("h", "other", ago(13), None, WALL, grace=12.0) is None
        # The Lease's own duration wins over the reader's grace.
        assert takeover_refused("h", "other", ago(13), 40, WALL, grace=12.0) is not None

    def test_renewed_every_quarter_grace_and_at_most_every_ten_seconds(self) -> None:
        assert heartbeat_interval(12.0) == 3.0
        assert heartbeat_interval(40.0) == 10.0
        assert heartbeat_interval(300.0) == 10.0
