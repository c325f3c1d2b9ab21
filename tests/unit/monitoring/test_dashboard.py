"""deploy/monitoring/grafana-dashboard.json reads only what exists: every PromQL query of its
panels and template variables names only metrics the daemon serves and docs/metrics.md documents,
or that rules.yaml records; promtool parses every query (each put in a temporary rules file as a
recording rule); and the dashboard has the views issue 29 asks for (a fleet and a per-VM view
with namespace, VM and host variables, CPU, memory, disk and network)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.dashboard import VARIABLE, concrete, panels, queries, variables
from tests.unit.monitoring.metric_names import documented, exported, recorded

# PromQL words that are not metric names.
KEYWORDS = {
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
    "group_left", "group_right", "inf", "nan",
}  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"(?<![\w.])[a-zA-Z_:][a-zA-Z0-9_:]*")


def _queries() -> list[tuple[str, str]]:
    return [(q.where, q.expr) for q in queries()]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: its identifiers once strings, label
    matchers, ranges and grouping clauses are taken out, less functions and keywords."""
    text = _STRING.sub('""', concrete(expr))
    text = _RANGE.sub("", _MATCHERS.sub("", text))
    text = _GROUPING.sub(" ", text)
    names = set()
    for found in _NAME.finditer(text):
        rest = text[found.end() :].lstrip()
        if found.group() in KEYWORDS or rest.startswith("("):
            continue
        names.add(found.group())
    return names


def test_the_name_scan_finds_metrics_and_nothing_else() -> None:
    expr = (
        'sum by (namespace, name) (rate(vmapi_machine_cpu_seconds_total{host=~"$host", '
        'name="x y"}[$__rate_interval])) / on (namespace) group_left (host) '
        "host:vmapi_host_cpu_allocation:ratio > bool 0.5 or vector(1e-9)"
    )
    assert metric_names(expr) == {
        "vmapi_machine_cpu_seconds_total",
        "host:vmapi_host_cpu_allocation:ratio",
    }


def test_the_dashboard_has_queries_at_all() -> None:
    queries = _queries()
    assert len(queries) >= 30
    assert all(expr.strip() for _where, expr in queries)


def test_every_metric_the_dashboard_reads_is_recorded_or_exported_and_documented() -> None:
    known_recorded = recorded()
    served = exported() & documented()
    unknown = {
        where: sorted(metric_names(expr) - known_recorded - served) for where, expr in _queries()
    }
    assert {where: names for where, names in unknown.items() if names} == {}
    used = set().union(*(metric_names(expr) for _where, expr in _queries()))
    assert used & known_recorded, "the dashboard reads no recording rule"


def test_every_query_parses_for_promtool(promtool: str, tmp_path: Path) -> None:
    queries = _queries()
    rules = {
        "groups": [
            {
                "name": "grafana-dashboard",
                "rules": [
                    {"record": f"dashboard_query_{index}", "expr": concrete(expr)}
                    for index, (_where, expr) in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    done = subprocess.run(
        [promtool, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    where = "\n".join(f"dashboard_query_{i}: {w}" for i, (w, _e) in enumerate(queries))
    assert done.returncode == 0, f"{done.stdout}{done.stderr}\n{where}"
    assert f"{len(queries)} rules found" in done.stdout, done.stdout


def test_variables_are_only_used_as_regex_matchers() -> None:
    """A multi-value variable expands to `a|b`: only a `=~` matcher reads that right."""
    for where, expr in _queries():
        for found in VARIABLE.finditer(expr):
            if found.group(1).startswith("__"):
                continue
            before = expr[: found.start()]
            assert before.endswith('=~"'), f"{where}: ${found.group(1)} outside a =~ matcher"


def test_it_has_the_namespace_vm_and_hostvariables() -> None:
    names = {variable["name"] for variable in variables()}
    assert {"datasource", "namespace", "vm", "host"} <= names
    for variable in variables():
        if variable["type"] == "query":
            assert variable["multi"]
            assert variable["includeAll"]
            assert variable["allValue"] == ".*"


@pytest.mark.parametrize(
    "family",
    [
        "vmapi_machine_cpu_seconds_total",
        "vmapi_machine_memory_rss_bytes",
        "vmapi_machine_disk_read_bytes_total",
        "vmapi_machine_disk_write_bytes_total",
        "vmapi_machine_network_receive_bytes_total",
        "vmapi_machine_network_transmit_bytes_total",
        "vmapi_host_ready",
        "vmapi_host_capacity_cpus",
        "vmapi_host_allocatable_memory_bytes",
        "host_power_state:vmapi_host_machines:sum",
        "host_pool:vmapi_host_pool_fullness:ratio",
    ],
)
def test_the_fleet_and_machine_views_read(family: str) -> None:
    assert any(family in metric_names(expr) for _where, expr in _queries())


def test_every_panel_reads_the_chosen_datasource_and_ids_are_unique() -> None:
    every = list(panels())
    ids = [panel["id"] for panel in every]
    assert len(ids) == len(set(ids))
    for panel in every:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel.get("targets"), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
