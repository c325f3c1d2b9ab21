"""What /metrics serves: `prometheus_client`'s registry, then the families written as text.

Why a module of its own: the per-machine families (one bulk statistics call per host, a few
series per machine) and the machines' readiness are made anew at each scrape, thousands of
samples with 1,000 machines, and `prometheus_client`'s exposition of that many costs the
reconcile threads the interpreter for about 100 ms a body (docs/metrics.md). Those collectors
write their own text (`metrics.exposition`, the same format) and are added here instead of to
the registry; everything else stays in the registry. `body` is what the HTTP endpoint sends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from prometheus_client import REGISTRY, generate_latest

__all__ = ["TextSource", "body", "register_text"]

TextSource = Callable[[], str]
"""Families in Prometheus' text format, whole lines, none of them also in the registry."""

_sources: list[TextSource] = []
_lock = threading.Lock()


def register_text(source: TextSource) -> None:
    """Serve `source()` on /metrics after the registry's families (once per source)."""
    with _lock:
        if source not in _sources:
            _sources.append(source)


def body() -> bytes:
    """The whole /metrics body, in Prometheus' text format."""
    with _lock:
        sources = list(_sources)
    return generate_latest(REGISTRY) + "".join(source() for source in sources).encode()
