"""Prometheus figures of the calls each served host's libvirtd receives, and their limits.

Why a collector: the hosts a daemon serves change at run time (remote mode claims and releases
them), and the figures live in each connection's `CallLimiter`; a collector reads them when
scraped instead of mirroring them into gauges on every call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor

__all__ = ["register_call_metrics"]

Hosts = Callable[[], Iterable[tuple[str, LibvirtHypervisor]]]


class _CallCollector(Collector):
    def __init__(self, hosts: Hosts) -> None:
        self._hosts = hosts

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        calls = CounterMetricFamily(
            "vmapi_libvirt_calls", "libvirt calls started toward the host.", labels=["host"]
        )
        refused = CounterMetricFamily(
            "vmapi_libvirt_calls_refused",
            "libvirt calls that found no slot within the wait deadline (host busy).",
            labels=["host"],
        )
        in_flight = GaugeMetricFamily(
            "vmapi_libvirt_calls_in_flight", "libvirt calls in flight now.", labels=["host"]
        )
        peak = GaugeMetricFamily(
            "vmapi_libvirt_calls_in_flight_peak",
            "Most libvirt calls in flight at once since the daemon started.",
            labels=["host"],
        )
        per_second = GaugeMetricFamily(
            "vmapi_libvirt_calls_peak_per_second",
            "Most libvirt calls started within one second since the daemon started.",
            labels=["host"],
        )
        limit = GaugeMetricFamily(
            "vmapi_libvirt_call_limit",
            "The host's call limits: qps, burst and max_concurrent.",
            labels=["host", "limit"],
        )
        connected = GaugeMetricFamily(
            "vmapi_libvirt_connected", "1 while the host's libvirtd is connected.", labels=["host"]
        )
        for host, hypervisor in self._hosts():
            stats = hypervisor.limiter_stats()
            calls.add_metric([host], stats.calls)
            refused.add_metric([host], stats.refused)
            in_flight.add_metric([host], stats.in_flight)
            peak.add_metric([host], stats.peak_in_flight)
            per_second.add_metric([host], stats.peak_per_second)
            limit.add_metric([host, "qps"], stats.limits.qps)
            limit.add_metric([host, "burst"], stats.limits.burst)
            limit.add_metric([host, "max_concurrent"], stats.limits.max_concurrent)
            connected.add_metric([host], 1.0 if hypervisor.connection_state().connected else 0.0)
        yield from (calls, refused, in_flight, peak, per_second, limit, connected)


_registered: list[_CallCollector] = []


def register_call_metrics(hosts: Hosts) -> None:
    """Serve the figures of the hosts `hosts()` names, in the default registry (registered once
    per process; a later call only changes where the hosts come from)."""
    if _registered:
        _registered[0]._hosts = hosts
        return
    collector = _CallCollector(hosts)
    REGISTRY.register(collector)
    _registered.append(collector)
