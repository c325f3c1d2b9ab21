"""Prometheus metrics of the generic controller, in the process-wide default registry.

An embedding process that serves `prometheus_client`'s default registry (the daemon) exposes
them without further wiring; `python -m generic --metrics-port` serves them on its own.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "QUEUE_DEPTH",
    "RECONCILES",
    "RECONCILE_SECONDS",
    "WATCHED_PROVIDER_KINDS",
    "WATCH_CALLBACK_ERRORS",
]

RECONCILES: Final = Counter(
    "vmapi_generic_reconciles_total",
    "Reconciles of generic VirtualMachines, by what the work queue was told to do next.",
    ["result"],
)
"""result: done, requeue (timed re-check), retry (backoff), conflict (again at once)."""

RECONCILE_SECONDS: Final = Histogram(
    "vmapi_generic_reconcile_duration_seconds",
    "Time one reconcile of a generic VirtualMachine took, API calls included.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)

QUEUE_DEPTH: Final = Gauge(
    "vmapi_generic_queue_depth",
    "Generic VirtualMachines waiting to be reconciled, delayed included.",
)

WATCHED_PROVIDER_KINDS: Final = Gauge(
    "vmapi_generic_watched_provider_kinds",
    "Provider kinds (labelled CRDs) whose objects are currently watched.",
)

WATCH_CALLBACK_ERRORS: Final = Counter(
    "vmapi_generic_watch_callback_errors_total",
    "Exceptions raised by the code a list-then-watch loop hands its lists and events to: bugs, "
    "not API failures.",
    ["watch", "callback"],
)
"""watch: the loop's name, which names its kind (`informer-<plural>`,
`generic-watch-<Kind>.<group>`); callback: target, list, event or failure."""
