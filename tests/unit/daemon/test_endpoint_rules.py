"""The health endpoint's rules: the connection budget and when a readiness verdict is believed."""

from __future__ import annotations

from libvirt_provider.adapters.process.endpoint_rules import (
    READINESS_CHECKS_SECONDS,
    ConnectionBudget,
    ReadinessCache,
    readiness_max_age,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_refuses_connections_over_the_total_until_one_is_released() -> None:
    budget = ConnectionBudget(max_connections=3, max_per_peer=3)
    assert [budget.admit(peer) for peer in ("a", "b", "c", "d")] == [True, True, True, False]
    assert budget.open() == 3
    budget.release("b")
    assert budget.admit("d")
    assert not budget.admit("e")


def test_one_address_cannot_take_the_slots_another_needs() -> None:
    budget = ConnectionBudget(max_connections=10, max_per_peer=2)
    assert [budget.admit("10.0.0.9") for _ in range(5)] == [True, True, False, False, False]
    assert budget.admit("10.0.0.1")  # the kubelet's node
    budget.release("10.0.0.9")
    assert budget.admit("10.0.0.9")
    assert budget.open() == 3


def test_releasing_every_connection_of_an_address_forgets_it() -> None:
    budget = ConnectionBudget(max_connections=2, max_per_peer=1)
    for _ in range(100):
        assert budget.admit("a")
        budget.release("a")
    assert budget.open() == 0
    assert budget.admit("a")
    assert budget.admit("b")


def test_readiness_is_not_believed_before_the_first_verdict() -> None:
    answer = ReadinessCache(max_age=30, clock=Clock()).answer()
    assert answer.age is None
    assert answer.problems == (("readiness", "not checked yet"),)


def test_the_last_verdict_is_answered_with_its_age() -> None:
    clock = Clock()
    cache = ReadinessCache(max_age=30, clock=clock)
    cache.record([("libvirt", "no socket")])
    clock.now += 4
    answer = cache.answer()
    assert answer.problems == (("libvirt", "no socket"),)
    assert answer.age == 4
    cache.record([])
    assert cache.answer().problems == ()


def test_a_verdict_older_than_the_bound_is_not_ready_even_when_it_said_ok() -> None:
    clock = Clock()
    cache = ReadinessCache(max_age=30, clock=clock)
    cache.record([])
    clock.now += 30
    assert cache.answer().problems == ()  # at the bound: still believed
    clock.now += 1
    answer = cache.answer()
    assert [name for name, _ in answer.problems] == ["readiness"]
    assert "last checked 31 s ago, more than 30 s" in answer.problems[0][1]
    cache.record([])  # the loop came back
    assert cache.answer().problems == ()


def test_a_verdict_is_believed_for_one_interval_and_the_checks_bounds_twice() -> None:
    assert readiness_max_age(10.0) == 30.0
    # A shorter interval (a faster probe) gives up on a stuck loop sooner, never before the
    # checks could have ended on their own.
    assert readiness_max_age(2.0) == 22.0 > 2.0 + READINESS_CHECKS_SECONDS
