"""Host and control-plane metrics on /metrics, from what the daemon already holds.

Per served host: its LibvirtHost as the host agent's watch shows it (ready, capacity,
allocatable, allocated, each pool's sizes), its machines by power state and
InfrastructureReady reason, and each machine's readiness with its VM's desired power state (the
watch-fed copies); and whether this daemon leads the generic controller. A scrape reads memory
only: no API server or libvirt call (`metrics.fleet` holds the mapping; docs/metrics.md lists
the metrics).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from libvirt_provider import constants as c
from libvirt_provider.adapters.process.machine_metrics import Sources
from libvirt_provider.metrics.fleet import (
    HOST_FAMILIES,
    host_samples,
    readiness_samples,
    state_samples,
)
from libvirt_provider.metrics.machine_stats import Family

__all__ = ["HostStateCollector", "register_host_metrics"]

log = logging.getLogger(__name__)

Leading = Callable[[], bool | None]
"""Whether this daemon leads the generic controller; None when it takes no part."""


class HostStateCollector(Collector):
    def __init__(self, sources: Sources, leading: Leading) -> None:
        self.sources = sources
        self.leading = leading

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield from (_family(f) for f in HOST_FAMILIES)
        yield _leader_family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = {f: _family(f) for f in HOST_FAMILIES}
        for source in self.sources():
            try:
                samples = host_samples(source.host, source.host_object())
                samples += state_samples(source.host, source.machine_states())
                samples += readiness_samples(source.host, source.machine_readiness())
            except Exception:  # a bug here must not take /metrics down: said in the log
                log.exception("host %s: its state metrics failed", source.host)
                continue
            for sample in samples:
                families[sample.family].add_metric(list(sample.labels), sample.value)
        yield from families.values()
        leader = _leader_family()
        leading = self.leading()
        if leading is not None:
            leader.add_metric([], 1.0 if leading else 0.0)
        yield leader


def _family(family: Family) -> GaugeMetricFamily:
    return GaugeMetricFamily(family.name, family.help, labels=list(family.labels))


def _leader_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        f"{c.METRICS_PREFIX}_generic_leader",
        "1 while this daemon leads the generic controller (holds its Lease); absent when it "
        "takes no part (--no-generic).",
    )


_registered: list[HostStateCollector] = []


def register_host_metrics(sources: Sources, leading: Leading) -> HostStateCollector:
    """Serve the hosts `sources()` names and the leader status, in the default registry
    (registered once per process; a later call only changes where they come from)."""
    if _registered:
        _registered[0].sources, _registered[0].leading = sources, leading
        return _registered[0]
    collector = HostStateCollector(sources, leading)
    REGISTRY.register(collector)
    _registered.append(collector)
    return collector
