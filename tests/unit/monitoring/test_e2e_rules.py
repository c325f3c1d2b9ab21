"""The alerts' e2e test's Prometheus (tests/support/prometheus.py): the rules it loads are the
shipped ones but for each alert's `for:`, so the e2e test proves the shipped expressions, labels
and annotations, not a copy that drifted; and a machine without Debian's prometheus fails that
test, naming the package, instead of skipping it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support import prometheus
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


def test_a_missing_prometheus_fails_naming_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prometheus, "PROMETHEUS", tmp_path / "prometheus")
    with pytest.raises(pytest.fail.Exception, match="install Debian's prometheus package"):
        prometheus.start_prometheus(
            ["127.0.0.1:1"], job="libvirt-provider", workdir=tmp_path, log=tmp_path / "log"
        )
