"""A real Prometheus for e2e tests: Debian's `/usr/bin/prometheus`, scraping the daemons under test
and evaluating `deploy/monitoring/rules.yaml`, so that an alert is proved by the rule engine an
operator runs, against the daemons' real /metrics, and not only by promtool's unit tests on
sample series (tests/unit/monitoring/).

Why a module of its own: the server's command line, its generated configuration, the one change
made to the rules (every alert's `for:` shortened, see `rules_for_tests`) and reading its HTTP API
belong together, apart from any one test.

It stays on the machine's loopback: it listens on 127.0.0.1 only, scrapes only the loopback
targets it is given (anything else is refused here), and has no Alertmanager, remote write or
service discovery configured, so it reaches nothing else. It is started per test module and
stopped at its end; its log is kept beside the daemons' (`daemons.log_dir()`).
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.daemons import free_port
from tests.support.lab_access import REPO
from tests.support.waiting import eventually

__all__ = [
    "PROMETHEUS",
    "RULES",
    "Alert",
    "Prometheus",
    "rules_for_tests",
    "start_prometheus",
]

PROMETHEUS = Path("/usr/bin/prometheus")
RULES = REPO / "deploy" / "monitoring" / "rules.yaml"
# How long an alert's condition must hold in the tests, in place of its minutes in rules.yaml:
# two evaluations at the 1 s interval below, so a one-off sample cannot fire an alert.
TEST_FOR = "2s"
INTERVAL = "1s"
STOP_SECONDS = 15.0
# Proxies from the environment never apply: every request here is to the server on loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Alert:
    """One active alert as /api/v1/alerts shows it (`state` is `pending` or `firing`)."""

    name: str
    state: str
    labels: dict[str, str]
    annotations: dict[str, str]


def rules_for_tests(rules: dict[str, Any], hold: str = TEST_FOR) -> dict[str, Any]:
    """`rules` with every alert's `for:` set to `hold`, and nothing else changed: the
    expressions, labels and annotations are the shipped ones, so those are what is tested; only
    the minutes an operator waits before being paged would make the tests wait as long."""
    shortened = copy.deepcopy(rules)
    for group in shortened["groups"]:
        for rule in group["rules"]:
            if "alert" in rule and "for" in rule:
                rule["for"] = hold
    return shortened


@dataclass
class Prometheus:
    """A running Prometheus on 127.0.0.1; `url` is its base URL."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def _get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with _OPENER.open(f"{self.url}{path}{query}", timeout=10) as resp:
            body = json.loads(resp.read().decode())
        assert body.get("status") == "success", f"{path}: {body}"
        return body["data"]

    def alerts(self) -> list[Alert]:
        """The active alerts (pending or firing); a resolved alert is no longer listed."""
        self.check_running()
        return [
            Alert(
                name=a["labels"].get("alertname", ""),
                state=a["state"],
                labels=a["labels"],
                annotations=a.get("annotations") or {},
            )
            for a in self._get("/api/v1/alerts")["alerts"]
        ]

    def active(self, name: str, **labels: str) -> list[Alert]:
        """The active alerts called `name` whose labels include `labels`."""
        return [
            a
            for a in self.alerts()
            if a.name == name and all(a.labels.get(k) == v for k, v in labels.items())
        ]

    def firing(self, name: str, **labels: str) -> Alert | None:
        """The one firing alert called `name` with `labels`, if it fires."""
        found = [a for a in self.active(name, **labels) if a.state == "firing"]
        assert len(found) <= 1, f"more than one {name} {labels} firing: {found}"
        return found[0] if found else None

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        """An instant query's samples: (labels, value)."""
        self.check_running()
        data = self._get("/api/v1/query", query=expr)
        return [(s["metric"], float(s["value"][1])) for s in data["result"]]

    def check_running(self) -> None:
        assert self.proc.poll() is None, f"prometheus exited ({self.proc.returncode}); {self.log}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _config(targets: list[str], job: str, rules: Path) -> dict[str, Any]:
    return {
        "global": {
            "scrape_interval": INTERVAL,
            "scrape_timeout": INTERVAL,
            "evaluation_interval": INTERVAL,
        },
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": job,
                # The daemons' own host/pool/namespace labels win (docs/alerts.md).
                "honor_labels": True,
                "static_configs": [{"targets": targets}],
            }
        ],
    }


def start_prometheus(targets: list[str], *, job: str, workdir: Path, log: Path) -> Prometheus:
    """Prometheus scraping `targets` (host:port on 127.0.0.1) as job `job` with the shipped rules
    (their `for:` shortened), its configuration and data in `workdir`, its output in `log`;
    returns once it is ready. Fails the test, naming the package, when it is not installed."""
    if not PROMETHEUS.is_file():
        pytest.fail(
            f"{PROMETHEUS} is missing: install Debian's prometheus package "
            "(tests/lab/install-deps.sh does, keeping its own service off)",
            pytrace=False,
        )
    for target in targets:
        assert target.startswith("127.0.0.1:"), f"{target}: only loopback targets are scraped"
    rules = workdir / "rules.yaml"
    rules.write_text(yaml.safe_dump(rules_for_tests(yaml.safe_load(RULES.read_text()))))
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump(_config(targets, job, rules)))
    data = workdir / "data"
    shutil.rmtree(data, ignore_errors=True)
    port = free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(PROMETHEUS),
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=info",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", proc, log)

    def ready() -> bool:
        server.check_running()
        try:
            with _OPENER.open(f"{server.url}/-/ready", timeout=5) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    try:
        eventually(ready, timeout=60, what=f"prometheus ready (log: {log})")
    except BaseException:
        server.stop()
        raise
    return server
