"""deploy/monitoring/grafana-dashboard.json as the tests read it: its panels, its template
variables, every PromQL query in it, and each query as Grafana would send it to Prometheus once
its variables are filled in. Shared by the unit test (names and promtool) and the e2e test (a
real Prometheus evaluates each query)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.support.lab_access import REPO

__all__ = [
    "DASHBOARD",
    "VARIABLE",
    "Query",
    "concrete",
    "dashboard",
    "panels",
    "queries",
    "variables",
]

DASHBOARD = REPO / "deploy" / "monitoring" / "grafana-dashboard.json"
INTERVALS = re.compile(r"\$__(rate_interval|interval|range)\b")
VARIABLE = re.compile(r"\$\{?([a-zA-Z_]\w*)(?::\w+)?\}?")
# Grafana's label_values(selector, label) and label_values(label).
LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.*),)?\s*(?P<label>\w+)\s*\)$", re.S)


@dataclass(frozen=True)
class Query:
    """One query: where it is (a panel's title and its target's refId, or a variable's name),
    the row it is under, and its PromQL as written (variables unfilled)."""

    where: str
    row: str
    expr: str


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def panels(within: list[dict[str, Any]] | None = None) -> Iterator[dict[str, Any]]:
    """Every panel, rows' nested panels included."""
    for panel in dashboard()["panels"] if within is None else within:
        yield panel
        yield from panels(panel.get("panels") or [])


def variables() -> list[dict[str, Any]]:
    return list(dashboard()["templating"]["list"])


def queries() -> list[Query]:
    """Each panel target's `expr`, and the selector of each query variable's label_values()
    (a variable whose query is anything else fails here)."""
    found = []
    row = ""
    for panel in panels():
        if panel["type"] == "row":
            row = panel["title"]
        for target in panel.get("targets") or []:
            found.append(Query(f"panel {panel['title']!r} {target['refId']}", row, target["expr"]))
    for variable in variables():
        if variable["type"] != "query":
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        parsed = LABEL_VALUES.match(text.strip())
        assert parsed is not None, f"variable {variable['name']}: not a label_values() query"
        if parsed.group("selector"):
            found.append(Query(f"variable {variable['name']}", "", parsed.group("selector")))
    return found


def concrete(expr: str, **values: str) -> str:
    """The query as Grafana sends it: its interval variables 5m, each template variable the
    regex given for it in `values`, or `.*` (All)."""
    expr = INTERVALS.sub("5m", expr)
    return VARIABLE.sub(lambda m: values.get(m.group(1), ".*"), expr)
