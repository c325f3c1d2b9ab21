"""Per-machine metrics on /metrics: one bulk statistics call per host per scrape.

Each scrape asks every served host's libvirtd for all its running domains' statistics at once
(`LibvirtHypervisor.domain_stats`, one `virConnectGetAllDomainStats`), names each domain after
the machine the daemon's watch-fed copies say it is (`metrics.machine_stats`), and answers. The
series are made per scrape, never kept: a machine deleted (its copy dropped, its domain gone)
has no series at the next scrape.

Bounded: the hosts are asked side by side, each on a thread of its own, and the scrape waits at
most `MACHINE_STATS_DEADLINE_SECONDS` for them all. A host that has not answered by then (a
remote host that dropped, libvirtd restarting, a call slot not free) or that failed is left out
of this scrape and `vmapi_machine_stats_partial{host}` is 1. At most one call per host is in
flight: scrapes at the same moment share it, and while one is still waiting past a deadline,
later scrapes report the host partial at once instead of starting another, so a frozen libvirtd
costs one thread, not one per scrape. The call takes one token and one slot of the host's
`CallLimiter` like any other call: one call per scrape is far inside any budget, and inside it
the scrape can never take more from libvirtd than the budget allows (docs/metrics.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from libvirt_provider import constants as c
from libvirt_provider.adapters.process.exposition import register_text
from libvirt_provider.driver.base import DomainStatistics
from libvirt_provider.driver.types import DomainStats
from libvirt_provider.metrics.exposition import PAUSE_EVERY, render
from libvirt_provider.metrics.fleet import MachineReadiness, MachineState
from libvirt_provider.metrics.machine_stats import (
    FAMILIES,
    Family,
    Kind,
    MachineIdentity,
    MachineIndex,
    Sample,
    machine_samples,
)

__all__ = ["HostSource", "MachineStatsCollector", "register_machine_metrics", "yield_interpreter"]

log = logging.getLogger(__name__)

_PREFIX = f"{c.METRICS_PREFIX}_machine_stats"


@dataclass(frozen=True)
class HostSource:
    """One served host, as /metrics reads it: its name, its libvirt connection, its machines'
    identities, states and readiness (watch-fed copies) and its LibvirtHost (the agent's
    watch)."""

    host: str
    hypervisor: DomainStatistics
    machines: Callable[[], list[MachineIdentity]]
    machine_states: Callable[[], list[MachineState]] = list
    host_object: Callable[[], Mapping[str, Any] | None] = lambda: None
    machine_readiness: Callable[[], list[MachineReadiness]] = list


Sources = Callable[[], Iterable[HostSource]]


def yield_interpreter() -> None:
    """Let the daemon's other threads run now. Making a body is a stretch of pure Python; a
    reconcile thread whose API or libvirt answer arrives meanwhile would wait for the
    interpreter's lock until the switch interval (5 ms) forces it free, and again after each of
    its next calls, so a body paid by every reconcile in flight, several times over. Called every
    `PAUSE_EVERY` records and lines, a body hands the lock over as soon as one of them is back."""
    time.sleep(0)


Metric = GaugeMetricFamily | CounterMetricFamily


class _HostCall:
    """One bulk call of a host, on a thread of its own, and its answer."""

    def __init__(self, hypervisor: DomainStatistics) -> None:
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.answer: list[DomainStats] | None = None
        self.error: str | None = None
        # Unix time of the middle of the call: when the counters were read, as near as known.
        self.taken_at = time.time()
        self._hypervisor = hypervisor
        self.thread = threading.Thread(target=self._run, name="machine-stats", daemon=True)

    def _run(self) -> None:
        began = time.time()
        try:
            answer = self._hypervisor.domain_stats()
        except Exception as err:  # said as partial; a scrape never raises for a host
            with self.lock:
                self.error = f"{type(err).__name__}: {err}"
            return
        with self.lock:
            self.answer = answer
            self.taken_at = (began + time.time()) / 2


class MachineStatsCollector(Collector):
    """The per-machine families. Served as text (`text`, written by `metrics.exposition`: what
    /metrics sends, `exposition.register_text`); `collect` gives the same families as
    `prometheus_client` objects, for a registry."""

    def __init__(self, sources: Sources, *, deadline: float) -> None:
        self.sources = sources
        self._deadline = deadline
        self._calls: dict[str, _HostCall] = {}
        self._calls_lock = threading.Lock()

    def describe(self) -> Iterator[Metric]:
        """The families without samples: what registering asks for, so it makes no call."""
        yield from (_metric(f) for f in (*FAMILIES, *SCRAPE_FAMILIES))

    def collect(self) -> Iterator[Metric]:
        for family, samples in self.gather():
            metric = _metric(family)
            for sample in samples:
                metric.add_metric(list(sample.labels), sample.value)
            yield metric

    def text(self) -> str:
        """This scrape's families in Prometheus' text format."""
        return render(self.gather(), pause=yield_interpreter)

    def gather(self) -> list[tuple[Family, list[Sample]]]:
        """This scrape's samples, family by family (every family, those without samples too):
        one bulk call per host, named after the host's machine copies."""
        families: dict[Family, list[Sample]] = {f: [] for f in (*FAMILIES, *SCRAPE_FAMILIES)}
        sources = list(self.sources())
        started = time.monotonic()
        for source, answer, _taken_at in self.take(sources):
            host = (source.host,)
            families[SCRAPE_SECONDS].append(
                Sample(SCRAPE_SECONDS, host, time.monotonic() - started)
            )
            families[PARTIAL].append(Sample(PARTIAL, host, 0.0 if answer is not None else 1.0))
            if answer is None:
                families[NAMED].append(Sample(NAMED, host, 0.0))
                continue
            index = MachineIndex(source.machines())
            named = 0
            for count, stats in enumerate(answer, 1):
                if count % PAUSE_EVERY == 0:
                    yield_interpreter()
                key = index.find(stats)
                if key is None:
                    continue
                named += 1
                for sample in machine_samples(
                    stats, host=source.host, namespace=key[0], name=key[1]
                ):
                    families[sample.family].append(sample)
            families[NAMED].append(Sample(NAMED, host, float(named)))
        return list(families.items())

    def take(
        self, sources: Iterable[HostSource]
    ) -> Iterator[tuple[HostSource, list[DomainStats] | None, float]]:
        """Each source's bulk statistics (None: failed, or not within the deadline) and the Unix
        time they were taken, as each arrives; the hosts are asked side by side. What /metrics
        and `kubectl vm top` (the console endpoint) both read: their calls are shared."""
        end = time.monotonic() + self._deadline
        pending = [(source, self._start(source)) for source in sources]
        for source, call in pending:
            answer = self._finish(source.host, call, end)
            yield source, answer, call.taken_at if call is not None else time.time()

    def _start(self, source: HostSource) -> _HostCall | None:
        """The host's call: a new one, or the one in flight when it started within a deadline
        (two scrapes at once share it); None while an older one still waits (a hung host)."""
        with self._calls_lock:
            call = self._calls.get(source.host)
            if call is not None and call.thread.is_alive():
                if time.monotonic() - call.started < self._deadline:
                    return call
                return None
            call = self._calls[source.host] = _HostCall(source.hypervisor)
            call.thread.start()
        return call

    def _finish(self, host: str, call: _HostCall | None, end: float) -> list[DomainStats] | None:
        if call is None:
            log.debug("host %s: the previous statistics call is still waiting", host)
            return None
        call.thread.join(max(0.0, end - time.monotonic()))
        with call.lock:
            if call.error is not None:
                log.debug("host %s: no machine statistics: %s", host, call.error)
            elif call.answer is None:
                log.debug("host %s: no machine statistics within the deadline", host)
            return call.answer


def _scrape_family(suffix: str, help: str) -> Family:
    return Family(f"{_PREFIX}_{suffix}", Kind.GAUGE, help, ("host",))


PARTIAL = _scrape_family(
    "partial",
    "1 when this scrape has no machine statistics of the host: its bulk call failed or did "
    "not answer within the deadline.",
)
SCRAPE_SECONDS = _scrape_family(
    "scrape_seconds", "Time this scrape waited for the host's bulk statistics."
)
NAMED = _scrape_family("machines", "Machines of the host with statistics in this scrape.")
SCRAPE_FAMILIES = (PARTIAL, SCRAPE_SECONDS, NAMED)


def _metric(family: Family) -> Metric:
    labels = list(family.labels)
    if family.kind is Kind.COUNTER:
        return CounterMetricFamily(family.name, family.help, labels=labels)
    return GaugeMetricFamily(family.name, family.help, labels=labels)


_registered: list[MachineStatsCollector] = []


def register_machine_metrics(
    sources: Sources, *, deadline: float = c.MACHINE_STATS_DEADLINE_SECONDS
) -> MachineStatsCollector:
    """Serve the machines of the hosts `sources()` names, on /metrics (registered
    once per process; a later call only changes where the hosts come from)."""
    if _registered:
        _registered[0].sources = sources
        return _registered[0]
    collector = MachineStatsCollector(sources, deadline=deadline)
    register_text(collector.text)
    _registered.append(collector)
    return collector
