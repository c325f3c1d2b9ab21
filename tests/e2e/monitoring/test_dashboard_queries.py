"""The Grafana dashboard's queries in a real Prometheus: every query of deploy/monitoring/
grafana-dashboard.json evaluates without error against the real daemon's /metrics and the
shipped recording rules, and the fleet view's host panels show the watched host's figures.

The module's world is the alerts' (conftest.py: one daemon serving one extra host, a Prometheus
scraping it every second). About 20 s warm: the daemon and Prometheus starting, then a few
seconds until the recording rules have been evaluated.
"""

from __future__ import annotations

from tests.support.daemons import Daemon
from tests.support.dashboard import concrete, queries
from tests.support.prometheus import Prometheus
from tests.support.waiting import eventually

FLEET = "Fleet: hosts, capacity, machines by state"
# Fleet panels that show something for any host a daemon serves, machines or not: the host's
# own figures, its pools, and `... or vector(0)` counts.
ALWAYS_SHOWN = (
    "'Hosts reporting'",
    "'Hosts not Ready'",
    "'Hosts disconnected'",
    "'Hosts'",
    "'vCPU allocation'",
    "'Memory allocation'",
    "'Storage pools full'",
    "'Machine statistics partial'",
)


def test_every_query_evaluates_in_prometheus(prometheus: Prometheus, watched: Daemon) -> None:
    for query in queries():
        # An error answer (a parse or evaluation error) fails in `query`.
        prometheus.query(concrete(query.expr, host=watched.host.name))


def test_the_fleet_view_shows_the_watched_host(prometheus: Prometheus, watched: Daemon) -> None:
    host = watched.host.name
    shown = [q for q in queries() if q.row == FLEET and any(p in q.where for p in ALWAYS_SHOWN)]
    assert len(shown) >= len(ALWAYS_SHOWN)

    def all_answered() -> dict[str, list[tuple[dict[str, str], float]]] | None:
        answers = {q.where: prometheus.query(concrete(q.expr, host=host)) for q in shown}
        return answers if all(answers.values()) else None

    answers = eventually(
        all_answered, timeout=60, interval=1.0, what="every fleet panel answered for the host"
    )
    # One host reporting, Ready and connected; its capacity has CPUs and memory.
    assert [v for _l, v in answers["panel 'Hosts reporting' A"]] == [1.0]
    assert [v for _l, v in answers["panel 'Hosts not Ready' A"]] == [0.0]
    assert [v for _l, v in answers["panel 'Hosts disconnected' A"]] == [0.0]
    for ref in "ABCDEF":
        ((labels, value),) = answers[f"panel 'Hosts' {ref}"]
        assert labels == {"host": host}
        assert value >= 0
    assert answers["panel 'Hosts' A"][0][1] > 0  # capacity CPUs
    assert answers["panel 'Hosts' D"][0][1] > 0  # capacity memory
    for labels, fullness in answers["panel 'Storage pools full' A"]:
        assert labels["host"] == host
        assert 0 <= fullness <= 1
