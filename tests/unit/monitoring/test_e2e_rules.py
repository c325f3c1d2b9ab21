"""The rules the alerts' e2e test loads into Prometheus (tests/support/prometheus.py) are the
shipped ones but for each alert's `for:`: the e2e test proves the shipped expressions, labels and
annotations, not a copy that drifted."""

from __future__ import annotations

import yaml

from tests.support.prometheus import RULES, TEST_FOR, rules_for_tests


def test_only_each_alerts_for_is_shortened() -> None:
    shipped = yaml.safe_load(RULES.read_text())
    tested = rules_for_tests(shipped)
    alerts = 0
    for before, after in zip(shipped["groups"], tested["groups"], strict=True):
        for rule, changed in zip(before["rules"], after["rules"], strict=True):
            if "alert" in rule:
                alerts += 1
                assert changed["for"] == TEST_FOR, changed
                assert {**changed, "for": rule["for"]} == rule
            else:
                assert changed == rule
    assert alerts >= 10, "every shipped alert is in the tested rules"
    assert shipped == yaml.safe_load(RULES.read_text()), "the shipped rules are left untouched"
