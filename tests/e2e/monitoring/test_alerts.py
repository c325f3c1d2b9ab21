"""The shipped alerts fire and resolve in a real Prometheus after real faults in the lab (issue 29).

Prometheus (Debian's package) scrapes the daemon of one lab host and evaluates
deploy/monitoring/rules.yaml as shipped, but for every alert's `for:`, shortened to seconds
(`tests/support/prometheus.py`). Each test makes a fault that an operator meets, waits for the
alert to fire with the labels and annotations that name the host (and pool), undoes the fault and
waits for the alert to be gone while the metric it reads shows the healthy value again:

- the host's libvirtd stopped: `LibvirtHostNotReady`;
- a pool of the host filled past 95 % by a file written behind libvirt's back:
  `LibvirtHostPoolFillingUp` and `LibvirtHostPoolAlmostFull`.

No guest is booted.
"""

from __future__ import annotations

from tests.support.daemons import Daemon
from tests.support.lab_access import LabInfo, host_libvirtd
from tests.support.prometheus import Alert, Prometheus
from tests.support.small_pool import small_pool
from tests.support.waiting import eventually

# The daemon notices at its next heartbeat pass (it reads libvirt's inventory once per 10 s
# heartbeat), then a scrape, two evaluations and the alert's 2 s: about 15 s at worst; the rest
# is for a loaded machine.
ALERT_TIMEOUT = 60
SMALL_POOL = "vmapi-alerts-small"


def _quiet(prometheus: Prometheus, alert: str, healthy: str, **labels: str) -> bool:
    """No `alert` with `labels` is active, and `healthy` (a query of the metric it reads) has a
    result: the alert is gone because the fault is, not because a scrape was missed."""
    return not prometheus.active(alert, **labels) and bool(prometheus.query(healthy))


def test_a_host_whose_libvirtd_is_down_fires_host_not_ready_until_it_is_back(
    watched: Daemon, prometheus: Prometheus
) -> None:
    host = watched.host.name
    ready = f'max by (host) (vmapi_host_ready{{host="{host}"}}) == 1'
    eventually(
        lambda: _quiet(prometheus, "LibvirtHostNotReady", ready, host=host),
        timeout=ALERT_TIMEOUT,
        what=f"{host} Ready in prometheus, LibvirtHostNotReady quiet",
    )

    host_libvirtd(host, up=False)
    try:
        alert: Alert = eventually(
            lambda: prometheus.firing("LibvirtHostNotReady", host=host),
            timeout=ALERT_TIMEOUT,
            what=f"LibvirtHostNotReady firing for {host} (daemon log: {watched.log})",
        )
    finally:
        host_libvirtd(host, up=True)
    assert alert.labels["severity"] == "critical", alert
    assert host in alert.annotations["summary"], alert
    assert host in alert.annotations["description"], alert
    assert alert.annotations["runbook_url"].endswith("/LibvirtHostNotReady.md"), alert

    eventually(
        lambda: _quiet(prometheus, "LibvirtHostNotReady", ready, host=host),
        timeout=ALERT_TIMEOUT,
        what=f"LibvirtHostNotReady for {host} resolved once its libvirtd is back",
    )


def test_a_pool_filled_past_95_percent_fires_both_pool_alerts_until_it_is_emptied(
    lab: LabInfo, watched: Daemon, prometheus: Prometheus
) -> None:
    host = watched.host.name
    labels = {"host": host, "pool": SMALL_POOL}
    fullness = f'host_pool:vmapi_host_pool_fullness:ratio{{host="{host}",pool="{SMALL_POOL}"}}'
    with small_pool(lab, watched.host, SMALL_POOL) as pool:
        eventually(
            lambda: (
                _quiet(prometheus, "LibvirtHostPoolFillingUp", f"{fullness} < 0.85", **labels)
                and not prometheus.active("LibvirtHostPoolAlmostFull", **labels)
            ),
            timeout=ALERT_TIMEOUT,
            what=f"pool {SMALL_POOL} of {host} in prometheus, empty, its alerts quiet",
        )

        def both_firing() -> tuple[Alert, Alert] | None:
            warning = prometheus.firing("LibvirtHostPoolFillingUp", **labels)
            critical = prometheus.firing("LibvirtHostPoolAlmostFull", **labels)
            return (warning, critical) if warning and critical else None

        pool.fill(0.97)
        fired = eventually(
            both_firing,
            timeout=ALERT_TIMEOUT,
            what=f"both pool alerts firing for {SMALL_POOL} on {host} (log: {watched.log})",
        )
        for alert, severity in zip(fired, ("warning", "critical"), strict=True):
            assert alert.labels["severity"] == severity, alert
            for name in (host, SMALL_POOL):
                assert name in alert.annotations["summary"], alert
                assert name in alert.annotations["description"], alert

        pool.empty()
        eventually(
            lambda: (
                _quiet(prometheus, "LibvirtHostPoolFillingUp", f"{fullness} < 0.85", **labels)
                and not prometheus.active("LibvirtHostPoolAlmostFull", **labels)
            ),
            timeout=ALERT_TIMEOUT,
            what=f"both pool alerts for {SMALL_POOL} on {host} resolved once it is emptied",
        )
