"""Which metric names exist, for the tests of what reads them (rules.yaml and the Grafana
dashboard): every name the daemon serves, every name docs/metrics.md documents, and every name
rules.yaml records. A plain module beside the tests that share it (tests/support/__init__.py)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.metrics import MetricWrapperBase

import libvirt_provider.adapters.process.daemon  # noqa: F401  (imports every module-level metric)
from libvirt_provider.adapters.process.call_metrics import _CallCollector
from libvirt_provider.adapters.process.host_metrics import HostStateCollector
from libvirt_provider.adapters.process.machine_metrics import MachineStatsCollector

REPO = Path(__file__).resolve().parents[3]
MONITORING = REPO / "deploy" / "monitoring"
RULES = MONITORING / "rules.yaml"
# A PromQL name: metric names may hold colons (recorded ones do), so a recorded name is never
# mistaken for the exported metric inside it.
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def recorded() -> set[str]:
    """The names rules.yaml's recording rules define."""
    return {rule["record"] for rule in rules() if "record" in rule}


def _family_names(families: Iterator[Any]) -> set[str]:
    """The names a query uses for these families: a counter's with `_total`, a histogram's
    series."""
    names = set()
    for family in families:
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names |= {f"{family.name}_{suffix}" for suffix in ("bucket", "sum", "count")}
        else:
            names.add(family.name)
    return names


def exported() -> set[str]:
    """Every metric name the daemon serves: the module-level metrics of the imported packages
    and the families of the collectors /metrics registers at start."""
    names: set[str] = set()
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith(("generic", "libvirt_provider")):
            for value in vars(module).values():
                if isinstance(value, MetricWrapperBase):
                    names |= _family_names(iter(value.describe()))
    names |= _family_names(HostStateCollector(list, lambda: None).describe())
    names |= _family_names(MachineStatsCollector(list, deadline=1.0).describe())
    names |= _family_names(_CallCollector(list).collect())
    return names


def documented() -> set[str]:
    """The names in the first column of docs/metrics.md's tables."""
    names = set()
    for line in (REPO / "docs" / "metrics.md").read_text().splitlines():
        found = re.match(r"\| `(vmapi_[a-z0-9_]+)` \|", line)
        if found:
            names.add(found.group(1))
    return names
