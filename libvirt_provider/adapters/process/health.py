"""The daemon's HTTP endpoint: liveness, readiness and Prometheus metrics.

- `/healthz` (liveness): the daemon's own parts run (the LibvirtMachine operator, the leader
  campaign and, while this daemon leads, the generic controller). It does not look at libvirtd:
  a liveness probe that failed while libvirtd restarts would restart the pod in a loop, and a
  new pod could not do better.
- `/readyz` (readiness): the above, and libvirtd answers.

`/metrics` can be served apart (`--metrics-address`, for example on 127.0.0.1 only), since
the probes must be reachable by the kubelet but the metrics need not be reachable by anyone else.

Each check answers 200 `ok`, or 503 with one line per failing check, so `curl` or the pod's
Events say what is wrong (for example a libvirt socket that is not mounted).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import prometheus_client

__all__ = ["Check", "HealthServer", "bounded"]

log = logging.getLogger(__name__)

Check = Callable[[], str | None]
"""A named check returns None when fine, else what is wrong."""


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
    ) -> None:
        served = {"/healthz": list(liveness), "/readyz": [*liveness, *readiness]} if checks else {}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if metrics and self.path == "/metrics":
                    self._answer(
                        200,
                        prometheus_client.generate_latest(),
                        prometheus_client.CONTENT_TYPE_LATEST,
                    )
                    return
                if self.path not in served:
                    self.send_error(404)
                    return
                problems = _failing(served[self.path])
                body = "".join(f"{name}: {problem}\n" for name, problem in problems) or "ok\n"
                self._answer(503 if problems else 200, body.encode(), "text/plain; charset=utf-8")

            def _answer(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("health: " + format, *args)

        self._server = _Server((address, port), Handler)
        self.port = self._server.server_port
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A prober that gave up before the answer (a closed connection) is not the daemon's
        # error; the default prints a traceback to stderr.
        log.debug("health: answering %s failed", client_address, exc_info=True)


def bounded(check: Check, *, seconds: float, what: str) -> Check:
    """`check`, answered within `seconds`: a call that hangs (a frozen libvirtd) is a failing
    check at once, not a probe that times out without saying why."""

    def run() -> str | None:
        answer: list[str | None] = []
        worker = threading.Thread(
            target=lambda: answer.append(check()), name="health-check", daemon=True
        )
        worker.start()
        worker.join(seconds)
        if not answer:
            return f"{what} did not answer within {seconds:.0f} s"
        return answer[0]

    return run


def _failing(checks: Sequence[tuple[str, Check]]) -> list[tuple[str, str]]:
    problems = []
    for name, check in checks:
        try:
            problem = check()
        except Exception as err:  # a check that breaks is a failing check, not a dead server
            problem = f"{type(err).__name__}: {err}"
        if problem is not None:
            problems.append((name, problem))
    return problems
