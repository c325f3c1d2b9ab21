"""The daemon's HTTP endpoint: liveness, readiness and Prometheus metrics.

- `/healthz` (liveness): the daemon's own parts run (the LibvirtMachine operator, the leader
  campaign and, while this daemon leads, the generic controller). It does not look at libvirtd:
  a liveness probe that failed while libvirtd restarts would restart the pod in a loop, and a
  new pod could not do better. Its checks read the daemon's memory only, so they run per request.
- `/readyz` (readiness): the above, and libvirtd and the API server answer. Those checks make
  calls, so one loop of the server's own runs them every `readiness_interval` seconds and
  `/readyz` answers its last verdict with its age (`endpoint_rules.ReadinessCache`): requests,
  however many, never reach libvirtd or the API server.
- `/metrics`: `prometheus_client`'s registry, then the families written as text per scrape
  (`exposition.body`). The daemon serves it on a loopback listener of its own unless asked
  otherwise (`daemon.py`, docs/security.md says why).

Each check answers 200 `ok`, or 503 with one line per failing check, so `curl` or the pod's
Events say what is wrong (for example a libvirt socket that is not mounted).

The probe port is reachable by anyone on the pod network, without authentication, so what a
client may cost is bounded (`endpoint_rules.EndpointLimits`): connections over the total or
per-address bound are closed when accepted, each admitted one is served by a thread of its own
that ends within the request deadline plus one I/O timeout (reads time out, the whole request
must arrive within the deadline), and one request per connection (HTTP/1.0).
"""

from __future__ import annotations

import io
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import prometheus_client

from generic.background import BackgroundLoop
from libvirt_provider.adapters.process import exposition
from libvirt_provider.adapters.process.endpoint_rules import (
    ConnectionBudget,
    EndpointLimits,
    Problem,
    ReadinessCache,
    readiness_max_age,
)

__all__ = ["Check", "EndpointLimits", "HealthServer", "bounded"]

log = logging.getLogger(__name__)

Check = Callable[[], str | None]
"""A named check returns None when fine, else what is wrong."""

REFUSED = prometheus_client.Counter(
    "vmapi_endpoint_connections_refused_total",
    "Connections to the daemon's HTTP endpoint closed when accepted: over the total or "
    "per-address bound",
    ["listener"],
)

# Seconds between two runs of the readiness checks (the DaemonSet's readiness probe period: the
# checks cost what the kubelet's probes cost when each ran them, one LIST per period, however
# many requests come), and the age past which their last verdict is not believed: above one
# interval plus the checks' own bounds (3 s for libvirtd, 7 s for the API server, run one after
# the other), so only a loop that is stuck or gone reaches it.
READINESS_INTERVAL = 10.0
NOT_READY_INTERVAL = 1.0
READINESS_MAX_AGE = readiness_max_age(READINESS_INTERVAL)
# A /metrics body younger than this is served again rather than made anew. Making it (one bulk
# statistics call per host, naming, exposition) is CPU-bound Python, about 17 ms of CPU with
# 1,000 machines (bench/metrics_profile.py); with this bound no scraper, however eager, can take
# more than one body a second from the reconciles.
# Prometheus scrapes every 15 s or more, so it never sees a body made for an earlier scrape.
METRICS_MAX_AGE = 1.0


class MetricsBody:
    """The last /metrics body, shared by the scrapes that come within `max_age` of it; one body
    is made at a time (scrapes that arrive meanwhile wait for it and take it)."""

    def __init__(
        self, *, max_age: float = METRICS_MAX_AGE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._body = b""
        self._made = float("-inf")

    def get(self, make: Callable[[], bytes]) -> bytes:
        with self._lock:
            if self._clock() - self._made >= self._max_age:
                self._body = make()
                self._made = self._clock()
            return self._body


class HealthServer:
    def __init__(
        self,
        *,
        address: str,
        port: int,
        liveness: Sequence[tuple[str, Check]] = (),
        readiness: Sequence[tuple[str, Check]] = (),
        checks: bool = True,
        metrics: bool = True,
        name: str = "health",
        limits: EndpointLimits | None = None,
        readiness_interval: float = READINESS_INTERVAL,
        readiness_max_age: float = READINESS_MAX_AGE,
    ) -> None:
        bounds = limits or EndpointLimits()
        live = list(liveness)
        ready = list(readiness)
        cache = ReadinessCache(max_age=readiness_max_age)
        self.readiness = cache
        metrics_body = MetricsBody()

        def answer(path: str) -> tuple[int, bytes, str] | None:
            if metrics and path == "/metrics":
                text = metrics_body.get(exposition.body)
                return 200, text, prometheus_client.CONTENT_TYPE_LATEST
            if not checks or path not in ("/healthz", "/readyz"):
                return None
            problems = _failing(live)
            footer = ""
            if path == "/readyz":
                verdict = cache.answer()
                problems += verdict.problems
                if verdict.age is not None:
                    footer = f"(readiness checked {verdict.age:.1f} s ago)\n"
            body = "".join(f"{name}: {problem}\n" for name, problem in problems) or "ok\n"
            return 503 if problems else 200, (body + footer).encode(), "text/plain; charset=utf-8"

        class Handler(BaseHTTPRequestHandler):
            timeout = bounds.io_timeout

            def setup(self) -> None:
                super().setup()
                # Reads through a deadline for the whole request, not only per read.
                self.rfile.close()
                self.rfile = io.BufferedReader(
                    _DeadlineReader(
                        self.connection,
                        deadline=time.monotonic() + bounds.request_deadline,
                        io_timeout=bounds.io_timeout,
                    )
                )

            def do_GET(self) -> None:
                self.connection.settimeout(bounds.io_timeout)
                answered = answer(self.path)
                if answered is None:
                    self.send_error(404)
                    return
                code, body, content_type = answered
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s: " + format, name, *args)

        self._server = _Server((address, port), Handler, limits=bounds, name=name)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)

        def refresh(loop: BackgroundLoop) -> None:
            while not loop.stopping:
                problems = _failing(ready)
                cache.record(problems)
                # Not ready (starting, or libvirtd or the API server away): look again soon, so
                # the pod turns Ready within a second of the cause going away.
                if loop.pause(NOT_READY_INTERVAL if problems else readiness_interval):
                    return

        self._readiness = BackgroundLoop(f"{name}-readiness", refresh) if checks else None

    def start(self) -> None:
        if self._readiness is not None:
            self._readiness.start()
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._readiness is not None:
            # A check still running is bounded by its own deadline (`bounded`); the stop does
            # not wait for it.
            self._readiness.stop(timeout=1.0)

    def open_connections(self) -> int:
        return self._server.budget.open()


class _Server(HTTPServer):
    """One thread per admitted connection, and never more than the budget admits; connections
    over it are closed as they are accepted."""

    # The kernel's queue of connections not accepted yet; the accept loop empties it quickly
    # (a refused connection is only closed), so a flood does not crowd the kubelet out of it.
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        limits: EndpointLimits,
        name: str,
    ) -> None:
        super().__init__(address, handler)
        self.name = name
        self.budget = ConnectionBudget(
            max_connections=limits.max_connections, max_per_peer=limits.max_per_peer
        )
        self._refused = REFUSED.labels(listener=name)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        # False: socketserver closes the connection at once.
        if self.budget.admit(_peer(client_address)):
            return True
        self._refused.inc()
        log.debug("%s: refused a connection from %s: over the bound", self.name, client_address)
        return False

    def process_request(self, request: Any, client_address: Any) -> None:
        worker = threading.Thread(
            target=self._serve_one,
            args=(request, client_address),
            name=f"{self.name}-connection",
            daemon=True,
        )
        try:
            worker.start()
        except BaseException:
            self.budget.release(_peer(client_address))
            raise

    def _serve_one(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self.budget.release(_peer(client_address))

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A prober that gave up before the answer (a closed connection) is not the daemon's
        # error; the default prints a traceback to stderr.
        log.debug("%s: answering %s failed", self.name, client_address, exc_info=True)


def _peer(client_address: Any) -> str:
    return str(client_address[0]) if isinstance(client_address, tuple) else str(client_address)


class _DeadlineReader(io.RawIOBase):
    """A connection's bytes, each read waiting at most `io_timeout` and none after `deadline`
    (a `time.monotonic()` instant): a timeout ends the request (the handler closes)."""

    def __init__(self, sock: socket.socket, *, deadline: float, io_timeout: float) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline
        self._io_timeout = io_timeout

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request did not arrive within its deadline")
        self._sock.settimeout(min(self._io_timeout, remaining))
        return self._sock.recv_into(buffer)


def bounded(check: Check, *, seconds: float, what: str) -> Check:
    """`check`, answered within `seconds`: a call that hangs (a frozen libvirtd) is a failing
    check at once, not a probe that times out without saying why.

    At most one call of `check` is in flight: while one that hung has not returned, the next
    run reports it again instead of starting another (a frozen libvirtd would otherwise gain a
    stuck thread per run)."""
    lock = threading.Lock()
    pending: list[tuple[threading.Thread, float]] = []

    def run() -> str | None:
        answer: list[str | None] = []
        with lock:
            if pending and pending[0][0].is_alive():
                waited = time.monotonic() - pending[0][1]
                return f"{what} did not answer for {waited:.0f} s (the call is still waiting)"
            worker = threading.Thread(
                target=_answer_into, args=(check, answer), name="health-check", daemon=True
            )
            pending[:] = [(worker, time.monotonic())]
            worker.start()
        worker.join(seconds)
        if not answer:
            return f"{what} did not answer within {seconds:g} s"
        return answer[0]

    return run


def _answer_into(check: Check, answer: list[str | None]) -> None:
    try:
        answer.append(check())
    except Exception as err:  # said as the check's problem, not printed by the thread
        answer.append(f"{type(err).__name__}: {err}")


def _failing(checks: Sequence[tuple[str, Check]]) -> list[Problem]:
    problems = []
    for name, check in checks:
        try:
            problem = check()
        except Exception as err:  # a check that breaks is a failing check, not a dead server
            problem = f"{type(err).__name__}: {err}"
        if problem is not None:
            problems.append((name, problem))
    return problems
