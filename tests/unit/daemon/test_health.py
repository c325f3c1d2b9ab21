"""The health endpoint: probes say what is wrong; metrics can be served apart from them."""

from __future__ import annotations

import urllib.error
import urllib.request

from libvirt_provider.adapters.process.health import HealthServer


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_a_failing_check_is_a_503_that_names_it() -> None:
    server = HealthServer(
        address="127.0.0.1",
        port=0,
        liveness=[("machine controller", lambda: None)],
        readiness=[("libvirt", lambda: "cannot connect to libvirt: no socket")],
    )
    server.start()
    try:
        assert _get(server.port, "/healthz") == (200, "ok\n")
        assert _get(server.port, "/readyz") == (
            503,
            "libvirt: cannot connect to libvirt: no socket\n",
        )
        assert _get(server.port, "/metrics")[0] == 200
    finally:
        server.stop()


def test_metrics_served_apart_leave_the_probe_port_without_them() -> None:
    probes = HealthServer(address="127.0.0.1", port=0, metrics=False)
    metrics = HealthServer(address="127.0.0.1", port=0, checks=False)
    probes.start()
    metrics.start()
    try:
        assert _get(probes.port, "/metrics")[0] == 404
        assert _get(probes.port, "/healthz")[0] == 200
        assert _get(metrics.port, "/metrics")[0] == 200
        assert _get(metrics.port, "/healthz")[0] == 404
    finally:
        probes.stop()
        metrics.stop()
