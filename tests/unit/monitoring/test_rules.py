"""deploy/monitoring/: the rules file is valid for promtool, its alerts pass their promtool unit
tests (alerts_test.yaml), every alert has a case that fires and one that does not, its severity,
summary, description and a runbook that exists, every `vmapi_` metric a rule reads is one the
daemon exports and docs/metrics.md documents, and prometheusrule.yaml is what generate.py makes
of rules.yaml.

promtool comes from Debian's `prometheus` package, which tests/lab/install-deps.sh installs: its
absence fails these tests, never skips them.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.monitoring.metric_names import (
    MONITORING,
    NAME,
    REPO,
    RULES,
    documented,
    exported,
    rules,
)

PROMETHEUS_RULE = MONITORING / "prometheusrule.yaml"
TESTS = Path(__file__).resolve().parent / "alerts_test.yaml"
RUNBOOKS = REPO / "docs" / "runbooks"
RUNBOOK_BASE = "https://github.com/vm-api/libvirt-provider/blob/main/docs/runbooks/"
SEVERITIES = {"warning", "critical"}
# Alerts about something with no label of its own to name.
NAMELESS = {"VirtualMachineControllerNoLeader"}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def _alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in rules() if "alert" in rule}


def test_promtool_finds_the_rules_valid(promtool: str) -> None:
    done = _run(promtool, "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_and_recording_rule_passes_its_promtool_unit_tests(promtool: str) -> None:
    done = _run(promtool, "test", "rules", str(TESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_case_that_fires_and_one_that_does_not() -> None:
    cases = [
        case
        for test in yaml.safe_load(TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    ]
    firing = {case["alertname"] for case in cases if case.get("exp_alerts")}
    silent = {case["alertname"] for case in cases if not case.get("exp_alerts")}
    alerts = set(_alerts())
    assert alerts - firing == set(), "alerts with no case that fires"
    assert alerts - silent == set(), "alerts with no case that stays silent"
    assert (firing | silent) - alerts == set(), "cases of alerts rules.yaml does not have"


@pytest.mark.parametrize("name", sorted(_alerts()))
def test_every_alert_says_how_bad_what_where_and_links_its_runbook(name: str) -> None:
    rule = _alerts()[name]
    assert rule["labels"]["severity"] in SEVERITIES
    annotations = rule["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    assert all(annotations[key].strip() for key in ("summary", "description"))
    if name not in NAMELESS:
        assert "{{ $labels." in annotations["description"], "the description names no object"
    assert annotations["runbook_url"] == f"{RUNBOOK_BASE}{name}.md"
    assert (RUNBOOKS / f"{name}.md").is_file()


def _sections(path: Path) -> list[str]:
    return [line[3:].strip() for line in path.read_text().splitlines() if line.startswith("## ")]


def test_every_runbook_is_an_alerts_and_follows_the_template() -> None:
    template = _sections(RUNBOOKS / "TEMPLATE.md")
    assert template == ["Meaning", "Impact", "Diagnosis", "Mitigation"]
    runbooks = {p.stem for p in RUNBOOKS.glob("*.md")} - {"TEMPLATE"}
    assert runbooks == set(_alerts())
    for name in runbooks:
        assert _sections(RUNBOOKS / f"{name}.md") == template, name
        assert (RUNBOOKS / f"{name}.md").read_text().startswith(f"# {name}\n"), name


def test_every_metric_a_rule_reads_is_exported_and_documented() -> None:
    used = {
        name for rule in rules() for name in NAME.findall(rule["expr"]) if name.startswith("vmapi_")
    }
    assert "vmapi_machine_ready" in used  # the scan finds names at all
    served = exported()
    assert {"vmapi_libvirt_connected", "vmapi_host_ready"} <= served
    assert used - served == set(), "not served by the daemon"
    assert used - documented() == set(), "not in docs/metrics.md"


def test_the_recorded_names_say_their_labels_metric_and_operation() -> None:
    for rule in rules():
        if "record" not in rule:
            continue
        level, metric, operation = rule["record"].split(":")
        assert metric.startswith("vmapi_"), rule["record"]
        assert operation, rule["record"]
        # The labels the outermost aggregation keeps, joined by _, are the name's level.
        kept = re.search(r"\bby \(([^)]*)\)", rule["expr"])
        assert kept is not None, rule["record"]
        assert level == "_".join(label.strip() for label in kept.group(1).split(",")), rule


def test_the_prometheusrule_is_what_generate_makes_of_the_rules_file() -> None:
    done = _run(sys.executable, str(MONITORING / "generate.py"), "--stdout")
    assert done.returncode == 0, done.stderr
    assert PROMETHEUS_RULE.read_text() == done.stdout, (
        "deploy/monitoring/prometheusrule.yaml is out of date: run "
        "python3 deploy/monitoring/generate.py"
    )
    generated = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert generated["kind"] == "PrometheusRule"
    assert generated["apiVersion"] == "monitoring.coreos.com/v1"
    assert generated["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
