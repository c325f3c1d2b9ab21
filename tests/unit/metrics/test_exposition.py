"""The text format written directly (`metrics.exposition`) is prometheus_client's, byte for
byte: names, HELP and TYPE, label order and escaping, Go's float formatting, families without
samples or labels."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from libvirt_provider.metrics.exposition import PAUSE_EVERY, go_float, render
from libvirt_provider.metrics.machine_stats import Family, Kind, Sample

COUNTER = Family(
    "vmapi_test_bytes", Kind.COUNTER, "Bytes.\nA second line, a \\ too.", ("zone", "a")
)
GAUGE = Family("vmapi_test_ready", Kind.GAUGE, "Ready.", ("namespace", "name", "host"))
PLAIN = Family("vmapi_test_leader", Kind.GAUGE, "Leads.", ())
EMPTY = Family("vmapi_test_none", Kind.GAUGE, "Nothing yet.", ("host",))

FAMILIES = [
    (
        COUNTER,
        [
            Sample(COUNTER, ("z1", "x"), 7.0),
            Sample(COUNTER, ('quo"te', "back\\slash\nnewline"), 1e21),
        ],
    ),
    (
        GAUGE,
        [
            Sample(GAUGE, ("team", "web", "h1"), 1.0),
            Sample(GAUGE, ("team", "db", "h1"), 0.0),
            Sample(GAUGE, ("t", "ü-utf8", "h2"), 123456789.0),
        ],
    ),
    (PLAIN, [Sample(PLAIN, (), 1.0)]),
    (EMPTY, []),
]


class _Client(Collector):
    def collect(self):  # type: ignore[no-untyped-def]
        for family, samples in FAMILIES:
            kind = CounterMetricFamily if family.kind is Kind.COUNTER else GaugeMetricFamily
            metric = kind(family.name, family.help, labels=list(family.labels))
            for sample in samples:
                metric.add_metric(list(sample.labels), sample.value)
            yield metric


def test_the_text_is_prometheus_clients_byte_for_byte() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Client())
    assert render(FAMILIES) == generate_latest(registry).decode()


def test_values_are_written_as_go_writes_them() -> None:
    for value, text in [
        (1.0, "1.0"),
        (0.0, "0.0"),
        (-2.5, "-2.5"),
        (1234567.0, "1.234567e+06"),
        (123456.0, "123456.0"),
        (3e-9, "3e-09"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
    ]:
        assert go_float(value) == text, value


def test_a_long_body_pauses_every_so_many_lines_and_writes_the_same_text() -> None:
    many = [Sample(GAUGE, ("team", f"m{i}", "h1"), 1.0) for i in range(2 * PAUSE_EVERY + 1)]
    pauses: list[int] = []
    text = render([(GAUGE, many)], pause=lambda: pauses.append(1))
    assert len(pauses) == 2
    assert text == render([(GAUGE, many)])
