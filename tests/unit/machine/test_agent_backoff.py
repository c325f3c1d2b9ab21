"""A silent guest agent is asked less and less often, per machine, until it answers (pure)."""

from __future__ import annotations

from libvirt_provider import constants as c
from libvirt_provider.machine.agent_backoff import (
    AgentBackoff,
    AgentHealth,
    BackoffPolicy,
    after_answer,
    after_timeout,
    may_ask,
)


def test_a_fresh_agent_may_be_asked() -> None:
    assert may_ask(AgentHealth(), 0.0)
    assert not AgentHealth().unresponsive


def test_each_silence_in_a_row_doubles_the_pause_up_to_the_cap() -> None:
    policy = BackoffPolicy(first=10.0, cap=300.0)
    health, now, pauses = AgentHealth(), 0.0, []
    for _ in range(8):
        health = after_timeout(health, now, policy)
        pauses.append(health.retry_at - now)
        assert not may_ask(health, now)
        assert not may_ask(health, health.retry_at - 0.001)
        now = health.retry_at
        assert may_ask(health, now)
    assert pauses == [10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]
    assert health.unresponsive


def test_an_answer_clears_the_record() -> None:
    health = after_timeout(AgentHealth(), 5.0, BackoffPolicy())
    assert after_answer(health) == AgentHealth()


def test_the_defaults_are_the_documented_constants() -> None:
    policy = BackoffPolicy()
    assert policy.pause(1) == c.AGENT_BACKOFF_FIRST_SECONDS
    assert policy.pause(100) == c.AGENT_BACKOFF_MAX_SECONDS


def test_machines_are_backed_off_apart_on_the_given_clock() -> None:
    now = [100.0]
    backoff = AgentBackoff(clock=lambda: now[0], policy=BackoffPolicy(first=10.0, cap=60.0))
    assert backoff.timed_out("silent").retry_at == 110.0
    assert not backoff.may_ask("silent")
    assert backoff.may_ask("other")
    now[0] = 110.0
    assert backoff.may_ask("silent")
    assert backoff.timed_out("silent").retry_at == 130.0
    assert backoff.answered("silent") is True
    assert backoff.may_ask("silent")
    assert backoff.answered("silent") is False
    backoff.timed_out("other")
    backoff.forget("other")
    assert backoff.may_ask("other")
    assert backoff.health("other") == AgentHealth()
