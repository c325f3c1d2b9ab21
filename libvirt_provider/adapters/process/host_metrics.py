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

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from libvirt_provider import constants as c
from libvirt_provider.adapters.process.exposition import register_text
from libvirt_provider.adapters.process.machine_metrics import Sources, yield_interpreter
from libvirt_provider.metrics.exposition import render
from libvirt_provider.metrics.fleet import (
    HOST_FAMILIES,
    host_samples,
    readiness_samples,
    state_samples,
)
from libvirt_provider.metrics.machine_stats import Family, Kind, Sample

__all__ = ["HostStateCollector", "register_host_metrics"]

log = logging.getLogger(__name__)

Leading = Callable[[], bool | None]
"""Whether this daemon leads the generic controller; None when it takes no part."""


class HostStateCollector(Collector):
    """Served as text (`text`, what /metrics sends: one series per machine makes thousands
    with 1,000 machines, `adapters.process.exposition` says why); `collect` gives the same
    families as `prometheus_client` objects, for a registry."""

    def __init__(self, sources: Sources, leading: Leading) -> None:
        self.sources = sources
        self.leading = leading

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield from (_family(f) for f in (*HOST_FAMILIES, LEADER))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for family, samples in self.gather():
            metric = _family(family)
            for sample in samples:
                metric.add_metric(list(sample.labels), sample.value)
            yield metric

    def text(self) -> str:
        """This scrape's families in Prometheus' text format."""
        return render(self.gather(), pause=yield_interpreter)

    def gather(self) -> list[tuple[Family, list[Sample]]]:
        """This scrape's samples, family by family (every family, those without samples too),
        from memory."""
        families: dict[Family, list[Sample]] = {f: [] for f in (*HOST_FAMILIES, LEADER)}
        for source in self.sources():
            try:
                samples = host_samples(source.host, source.host_object())
                samples += state_samples(source.host, source.machine_states())
                samples += readiness_samples(source.host, source.machine_readiness())
            except Exception:  # a bug here must not take /metrics down: said in the log
                log.exception("host %s: its state metrics failed", source.host)
                continue
            for sample in samples:
                families[sample.family].append(sample)
        leading = self.leading()
        if leading is not None:
            families[LEADER].append(Sample(LEADER, (), 1.0 if leading else 0.0))
        return list(families.items())


def _family(family: Family) -> GaugeMetricFamily:
    return GaugeMetricFamily(family.name, family.help, labels=list(family.labels))


LEADER = Family(
    f"{c.METRICS_PREFIX}_generic_leader",
    Kind.GAUGE,
    "1 while this daemon leads the generic controller (holds its Lease); absent when it "
    "takes no part (--no-generic).",
    (),
)


_registered: list[HostStateCollector] = []


def register_host_metrics(sources: Sources, leading: Leading) -> HostStateCollector:
    """Serve the hosts `sources()` names and the leader status, on /metrics
    (registered once per process; a later call only changes where they come from)."""
    if _registered:
        _registered[0].sources, _registered[0].leading = sources, leading
        return _registered[0]
    collector = HostStateCollector(sources, leading)
    register_text(collector.text)
    _registered.append(collector)
    return collector
