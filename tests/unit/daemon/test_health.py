"""The health endpoint: probes say what is wrong; metrics can be served apart from them; and an
anonymous client on the probe port can neither make the daemon call libvirtd or the API server
nor hold its connections or threads.

Every server here listens on 127.0.0.1 and is started in-process; "another address" is
127.0.0.2, which is loopback too.
"""

from __future__ import annotations

import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from libvirt_provider.adapters.process.daemon import DaemonConfig, _metrics_server
from libvirt_provider.adapters.process.health import EndpointLimits, HealthServer, bounded
from tests.support.waiting import eventually

ATTACKER = "127.0.0.2"


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@contextmanager
def _serving(server: HealthServer) -> Iterator[HealthServer]:
    server.start()
    try:
        yield server
    finally:
        server.stop()


class CountingCheck:
    def __init__(self, answer: str | None = None) -> None:
        self.calls = 0
        self.answer = answer

    def __call__(self) -> str | None:
        self.calls += 1
        return self.answer


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def _readyz_when(port: int, says: str, *, code: int = 503) -> str:
    """The body of /readyz once it answers `code` with `says` in it."""

    def answered() -> str | None:
        status, body = _get(port, "/readyz")
        return body if status == code and says in body else None

    return eventually(answered, timeout=10, what=f"/readyz answering {code} with {says!r}")


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (end of stream or reset), without waiting."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def test_a_failing_check_is_a_503_that_names_it() -> None:
    server = HealthServer(
        address="127.0.0.1",
        port=0,
        liveness=[("machine controller", lambda: None)],
        readiness=[("libvirt", lambda: "cannot connect to libvirt: no socket")],
    )
    with _serving(server):
        assert _get(server.port, "/healthz") == (200, "ok\n")
        body = _readyz_when(server.port, "libvirt:")
        lines = body.splitlines()
        assert lines[0] == "libvirt: cannot connect to libvirt: no socket"
        assert lines[1].startswith("(readiness checked ")
        assert lines[1].endswith(" s ago)")
        assert _get(server.port, "/metrics")[0] == 200


def test_metrics_served_apart_leave_the_probe_port_without_them() -> None:
    probes = HealthServer(address="127.0.0.1", port=0, metrics=False)
    metrics = HealthServer(address="127.0.0.1", port=0, checks=False, name="metrics")
    with _serving(probes), _serving(metrics):
        assert _get(probes.port, "/metrics")[0] == 404
        assert _get(probes.port, "/healthz")[0] == 200
        assert _get(metrics.port, "/metrics")[0] == 200
        assert _get(metrics.port, "/healthz")[0] == 404
        assert _get(metrics.port, "/readyz")[0] == 404


def test_a_readyz_flood_runs_the_readiness_checks_once_per_interval() -> None:
    libvirt, kubernetes, controller = CountingCheck(), CountingCheck(), CountingCheck()
    server = HealthServer(
        address="127.0.0.1",
        port=0,
        liveness=[("machine controller", controller)],
        readiness=[("libvirt", libvirt), ("kubernetes", kubernetes)],
        readiness_interval=3600,  # one run at start, then none for the whole test
    )
    with _serving(server):
        eventually(lambda: _get(server.port, "/readyz")[0] == 200, timeout=10, what="ready")
        answers = [_get(server.port, "/readyz")[0] for _ in range(200)]
    assert answers == [200] * 200
    assert (libvirt.calls, kubernetes.calls) == (1, 1)
    assert controller.calls >= 200  # liveness reads memory only, so it runs per request


def test_readyz_follows_the_checks_as_the_loop_reruns_them() -> None:
    libvirt = CountingCheck()
    server = HealthServer(
        address="127.0.0.1", port=0, readiness=[("libvirt", libvirt)], readiness_interval=0.05
    )
    with _serving(server):
        eventually(lambda: _get(server.port, "/readyz")[0] == 200, timeout=10, what="ready")
        libvirt.answer = "libvirtd is gone"
        eventually(lambda: _get(server.port, "/readyz")[0] == 503, timeout=10, what="unready")
        libvirt.answer = None
        eventually(lambda: _get(server.port, "/readyz")[0] == 200, timeout=10, what="ready again")


def test_a_readiness_loop_stuck_in_a_check_makes_the_daemon_unready() -> None:
    release = threading.Event()
    calls: list[int] = []

    def hangs_after_the_first_call() -> str | None:
        calls.append(1)
        if len(calls) > 1:
            release.wait(30)
        return None

    server = HealthServer(
        address="127.0.0.1",
        port=0,
        readiness=[("libvirt", hangs_after_the_first_call)],
        readiness_interval=0.05,
        readiness_max_age=0.5,
    )
    try:
        with _serving(server):
            body = _readyz_when(server.port, "stuck")
            assert body.startswith("readiness: last checked ")
            release.set()  # the check returns: the loop records fresh verdicts again
            eventually(lambda: _get(server.port, "/readyz")[0] == 200, timeout=10, what="ready")
    finally:
        release.set()


def test_idle_connections_beyond_one_address_bound_are_closed_and_probes_still_answer() -> None:
    limits = EndpointLimits(max_connections=64, max_per_peer=8, io_timeout=30, request_deadline=60)
    server = HealthServer(address="127.0.0.1", port=0, limits=limits)
    idle: list[socket.socket] = []
    with _serving(server):
        try:
            idle = [_connect(server.port, source=ATTACKER) for _ in range(40)]
            eventually(
                lambda: sum(_closed_by_server(s) for s in idle) == 32,
                timeout=10,
                what="the connections over the attacker's bound closed",
            )
            assert server.open_connections() == 8
            connection_threads = [t for t in threading.enumerate() if t.name == "health-connection"]
            assert len(connection_threads) <= 8
            # The kubelet, from another address, is still answered.
            assert _get(server.port, "/healthz") == (200, "ok\n")
        finally:
            for sock in idle:
                sock.close()


def test_connections_over_the_total_bound_are_closed_until_the_held_ones_time_out() -> None:
    limits = EndpointLimits(max_connections=4, max_per_peer=4, io_timeout=0.5, request_deadline=5)
    server = HealthServer(address="127.0.0.1", port=0, limits=limits)
    with _serving(server):
        held = [_connect(server.port) for _ in range(4)]
        try:
            eventually(lambda: server.open_connections() == 4, timeout=10, what="4 admitted")
            extra = _connect(server.port)
            eventually(lambda: _closed_by_server(extra), timeout=10, what="the 5th closed")
            extra.close()
            # The held ones send nothing: each read times out and the server closes them.
            eventually(
                lambda: all(_closed_by_server(s) for s in held),
                timeout=10,
                what="idle connections closed after the read timeout",
            )
            eventually(lambda: server.open_connections() == 0, timeout=10, what="all released")
            assert _get(server.port, "/healthz")[0] == 200
        finally:
            for sock in held:
                sock.close()


def test_a_slowloris_that_keeps_trickling_is_cut_at_the_request_deadline() -> None:
    # Reads never time out here (30 s), so only the request's deadline can end the connection
    # within the wait below.
    limits = EndpointLimits(max_connections=8, max_per_peer=8, io_timeout=30, request_deadline=1)
    server = HealthServer(address="127.0.0.1", port=0, limits=limits)
    stop = threading.Event()
    cut = threading.Event()
    with _serving(server):
        sock = _connect(server.port, source=ATTACKER)

        def trickle() -> None:
            try:
                sock.sendall(b"GET /healthz HTTP/1.1\r\n")
                while not stop.wait(0.1):  # the attacker's pace: a header byte at a time
                    sock.sendall(b"X")
            except OSError:
                cut.set()

        attacker = threading.Thread(target=trickle, daemon=True)
        attacker.start()
        try:
            eventually(
                lambda: cut.is_set() or _closed_by_server_peek(sock),
                timeout=15,
                what="the trickling connection cut",
            )
            eventually(lambda: server.open_connections() == 0, timeout=10, what="released")
        finally:
            stop.set()
            attacker.join(5)
            sock.close()


def _closed_by_server_peek(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def test_a_partial_request_then_silence_is_closed_after_the_read_timeout() -> None:
    limits = EndpointLimits(max_connections=8, max_per_peer=8, io_timeout=0.3, request_deadline=30)
    server = HealthServer(address="127.0.0.1", port=0, limits=limits)
    with _serving(server):
        sock = _connect(server.port, source=ATTACKER)
        try:
            sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n")
            eventually(lambda: _closed_by_server(sock), timeout=10, what="closed")
            eventually(lambda: server.open_connections() == 0, timeout=10, what="released")
        finally:
            sock.close()


def test_a_check_that_hangs_is_not_called_again_while_it_hangs() -> None:
    release = threading.Event()
    calls: list[int] = []

    def hangs() -> str | None:
        calls.append(1)
        release.wait(30)
        return None

    check = bounded(hangs, seconds=0.05, what="libvirtd")
    try:
        assert check() == "libvirtd did not answer within 0.05 s"
        for _ in range(5):
            problem = check()
            assert problem is not None
            assert "the call is still waiting" in problem
        assert len(calls) == 1
    finally:
        release.set()
    assert eventually(lambda: check() is None, timeout=10, what="answering again once it returned")
    assert len(calls) == 2


def test_a_check_that_raises_is_a_failing_check() -> None:
    def raises() -> str | None:
        raise RuntimeError("boom")

    assert bounded(raises, seconds=5, what="x")() == "RuntimeError: boom"


def test_the_daemon_serves_metrics_on_loopback_apart_unless_asked_beside_the_probes() -> None:
    def config(health: str, metrics: str) -> DaemonConfig:
        return DaemonConfig(
            kubeconfig=None,
            libvirt_uri="test:///default",
            host="h",
            domain_types=None,
            health_address=health,
            health_port=0,
            generic=False,
            lease_namespace="ns",
            workers=1,
            metrics_address=metrics,
            metrics_port=0,
        )

    assert DaemonConfig.metrics_address == "127.0.0.1"
    apart = _metrics_server(config("0.0.0.0", "127.0.0.1"))
    assert apart is not None
    with _serving(apart):
        assert _get(apart.port, "/metrics")[0] == 200
        assert _get(apart.port, "/readyz")[0] == 404
    assert _metrics_server(config("127.0.0.1", "127.0.0.1")) is None
