"""The per-machine collector: one bulk call per host per scrape, named after the daemon's
machine copies, and a scrape that answers within its deadline with what it has (a failing or
hung host is marked partial, its next scrape does not pile a second call on the first), and no
series for a machine that is gone. The host-state collector: hosts, machines by state, each
machine's readiness joined with its VM's desired power state, the leader, all from memory.

The hosts here are fakes of `DomainStatistics`; the last test runs the real adapter on
libvirt's in-process test driver.
"""

from __future__ import annotations

import threading
import time

from kubernetes import client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from libvirt_provider.adapters.kube.adapter import KubeAdapter
from libvirt_provider.adapters.process import exposition
from libvirt_provider.adapters.process.host_metrics import HostStateCollector
from libvirt_provider.adapters.process.machine_metrics import HostSource, MachineStatsCollector
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor
from libvirt_provider.driver.types import DomainStats
from libvirt_provider.errors import RetryableError
from libvirt_provider.metrics.fleet import MachineReadiness
from libvirt_provider.metrics.machine_stats import MachineIdentity
from libvirt_provider.naming import domain_name
from tests.support.waiting import eventually

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class FakeHost:
    def __init__(self, records: list[DomainStats]) -> None:
        self.records = records
        self.calls = 0
        self.fail: Exception | None = None
        self.hold: threading.Event | None = None

    def domain_stats(self) -> list[DomainStats]:
        self.calls += 1
        if self.hold is not None:
            self.hold.wait(30)
        if self.fail is not None:
            raise self.fail
        return list(self.records)


def _machine(namespace: str, name: str, uid: str) -> tuple[MachineIdentity, DomainStats]:
    stats = DomainStats(
        uid,  # a machine's domain has its uid as UUID
        domain_name(namespace, name, uid),
        {
            "state.state": 1,
            "cpu.time": 3_000_000_000,
            "net.count": 1,
            "net.0.name": "vnet0",
            "net.0.rx.bytes": 7,
        },
    )
    return MachineIdentity(namespace, name, uid), stats


def _scrape(collector: MachineStatsCollector | HostStateCollector) -> Series:
    """The collector's families as /metrics serves them (its own text)."""
    text = collector.text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(series: Series, metric: str, **labels: str) -> float | None:
    return series.get((metric, tuple(sorted(labels.items()))))


def test_each_host_is_asked_once_per_scrape_and_its_machines_are_named() -> None:
    web, web_stats = _machine("team", "web", "u1")
    db, db_stats = _machine("team", "db", "u2")
    foreign = DomainStats("uuid-x", "someone-elses-domain", {"state.state": 1})
    h1, h2 = FakeHost([web_stats, foreign]), FakeHost([db_stats])
    collector = MachineStatsCollector(
        lambda: [HostSource("h1", h1, lambda: [web]), HostSource("h2", h2, lambda: [db])],
        deadline=5.0,
    )
    series = _scrape(collector)
    assert (h1.calls, h2.calls) == (1, 1)
    web_labels = {"namespace": "team", "name": "web", "host": "h1"}
    assert _value(series, "vmapi_machine_cpu_seconds_total", **web_labels) == 3.0
    assert (
        _value(series, "vmapi_machine_network_receive_bytes_total", **web_labels, interface="vnet0")
        == 7.0
    )
    assert _value(series, "vmapi_machine_domain_state", namespace="team", name="db", host="h2") == 1
    # The foreign domain has no series at all.
    states = [k for k in series if k[0] == "vmapi_machine_domain_state"]
    assert len(states) == 2
    assert _value(series, "vmapi_machine_stats_partial", host="h1") == 0.0
    assert _value(series, "vmapi_machine_stats_machines", host="h1") == 1.0


def test_a_deleted_machine_has_no_series_at_the_next_scrape() -> None:
    web, web_stats = _machine("team", "web", "u1")
    host = FakeHost([web_stats])
    machines = [web]
    collector = MachineStatsCollector(
        lambda: [HostSource("h1", host, lambda: list(machines))], deadline=5.0
    )
    assert any(k[0].startswith("vmapi_machine_cpu") for k in _scrape(collector))
    # The machine's copy is dropped and its domain undefined.
    machines.clear()
    host.records = []
    after = _scrape(collector)
    assert not [k for k in after if k[0].startswith("vmapi_machine_") and "stats" not in k[0]]
    assert _value(after, "vmapi_machine_stats_machines", host="h1") == 0.0


def test_a_failing_host_is_partial_and_the_others_still_answer() -> None:
    web, web_stats = _machine("team", "web", "u1")
    db, db_stats = _machine("team", "db", "u2")
    down, up = FakeHost([web_stats]), FakeHost([db_stats])
    down.fail = RetryableError("cannot connect to libvirt")
    collector = MachineStatsCollector(
        lambda: [HostSource("h1", down, lambda: [web]), HostSource("h2", up, lambda: [db])],
        deadline=5.0,
    )
    series = _scrape(collector)
    assert _value(series, "vmapi_machine_stats_partial", host="h1") == 1.0
    assert _value(series, "vmapi_machine_stats_partial", host="h2") == 0.0
    assert _value(series, "vmapi_machine_domain_state", namespace="team", name="db", host="h2") == 1
    assert (
        _value(series, "vmapi_machine_domain_state", namespace="team", name="web", host="h1")
        is None
    )


def test_a_hung_host_costs_one_deadline_and_one_call_however_many_scrapes() -> None:
    web, web_stats = _machine("team", "web", "u1")
    db, db_stats = _machine("team", "db", "u2")
    hung, fine = FakeHost([web_stats]), FakeHost([db_stats])
    hung.hold = threading.Event()
    collector = MachineStatsCollector(
        lambda: [HostSource("h1", hung, lambda: [web]), HostSource("h2", fine, lambda: [db])],
        deadline=0.5,
    )
    try:
        started = time.monotonic()
        first = _scrape(collector)
        took = time.monotonic() - started
        assert 0.5 <= took < 2.0
        assert _value(first, "vmapi_machine_stats_partial", host="h1") == 1.0
        assert _value(first, "vmapi_machine_stats_partial", host="h2") == 0.0
        # The call still waits: the next scrape does not start another, nor wait for it.
        started = time.monotonic()
        second = _scrape(collector)
        assert time.monotonic() - started < 0.5
        assert _value(second, "vmapi_machine_stats_partial", host="h1") == 1.0
        assert hung.calls == 1
        assert fine.calls == 2
    finally:
        hung.hold.set()

    # libvirtd answers again: so does the host, with one more call.
    def answered() -> Series | None:
        series = _scrape(collector)
        return series if _value(series, "vmapi_machine_stats_partial", host="h1") == 0.0 else None

    third = eventually(answered, timeout=10, what="the host answering again")
    assert hung.calls == 2
    assert _value(third, "vmapi_machine_domain_state", namespace="team", name="web", host="h1") == 1


def test_the_adapter_makes_one_bulk_call_on_the_test_driver() -> None:
    hypervisor = LibvirtHypervisor("test:///default")
    try:
        before = hypervisor.limiter_stats().calls
        records = hypervisor.domain_stats()
        assert hypervisor.limiter_stats().calls == before + 1
    finally:
        hypervisor.close()
    # test:///default has one running domain, "test"; its record carries the state.
    [record] = records
    assert record.name == "test"
    assert len(record.uuid) == 36
    assert record.values.get("state.state") == 1


def test_host_state_and_leader_come_from_memory_and_a_broken_host_spares_the_rest() -> None:
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}

    def broken() -> dict[str, object]:
        raise RuntimeError("a bug")

    never = FakeHost([])
    sources = [
        HostSource("h1", never, list, lambda: [("PoweredOn", "Running")], lambda: ready),
        HostSource("h2", never, list, list, broken),
    ]
    leading: list[bool | None] = [True]
    collector = HostStateCollector(lambda: sources, lambda: leading[0])
    series = _scrape(collector)
    assert never.calls == 0  # no libvirt call for these
    assert _value(series, "vmapi_host_ready", host="h1") == 1.0
    assert (
        _value(series, "vmapi_host_machines", host="h1", power_state="PoweredOn", reason="Running")
        == 1.0
    )
    assert not [k for k in series if ("host", "h2") in k[1]]
    assert _value(series, "vmapi_generic_leader") == 1.0
    leading[0] = None  # --no-generic: no leader series at all
    assert "vmapi_generic_leader" not in {name for name, _ in _scrape(collector)}


def test_each_machines_readiness_joins_its_vm_held_by_the_adapter() -> None:
    adapter = KubeAdapter(client.ApiClient(), host="h1")
    link = {"vm-api.io/virtual-machine": "web"}
    adapter.observe_vm(
        {
            "metadata": {"namespace": "team", "name": "web", "resourceVersion": "1"},
            "spec": {"powerState": "PoweredOn"},
        },
        deleted=False,
        wanted=True,
    )
    adapter.observe_machine(
        {
            "metadata": {
                "namespace": "team",
                "name": "web",
                "resourceVersion": "2",
                "annotations": link,
            },
            "status": {"conditions": [{"type": "InfrastructureReady", "status": "False"}]},
        },
        deleted=False,
    )
    source = HostSource("h1", FakeHost([]), list, machine_readiness=adapter.machine_readiness)
    series = _scrape(HostStateCollector(lambda: [source], lambda: None))
    labels = {"namespace": "team", "name": "web", "host": "h1"}
    assert _value(series, "vmapi_machine_ready", **labels, desired_power_state="PoweredOn") == 0
    # The machine deleted: no series at the next scrape.
    adapter.observe_machine({"metadata": {"namespace": "team", "name": "web"}}, deleted=True)
    assert not [
        k
        for k in _scrape(HostStateCollector(lambda: [source], lambda: None))
        if k[0] == "vmapi_machine_ready"
    ]


def test_scrapes_at_the_same_moment_share_one_call() -> None:
    web, web_stats = _machine("team", "web", "u1")
    host = FakeHost([web_stats])
    host.hold = threading.Event()
    collector = MachineStatsCollector(
        lambda: [HostSource("h1", host, lambda: [web])], deadline=10.0
    )
    answers: list[Series] = []
    scrapers = [threading.Thread(target=lambda: answers.append(_scrape(collector))) for _ in "ab"]
    start = collector._start

    def second_started(source: HostSource) -> object:
        # The call is released only once the second scrape holds it (or a new one).
        call = start(source)
        if threading.current_thread() is scrapers[1]:
            host.hold.set()
        return call

    collector._start = second_started  # type: ignore[method-assign,assignment]
    try:
        scrapers[0].start()
        eventually(lambda: host.calls == 1, timeout=5, what="the first scrape's call")
        scrapers[1].start()
    finally:
        scrapers[1].join(15)
        host.hold.set()
    for scraper in scrapers:
        scraper.join(10)
    assert len(answers) == 2
    assert host.calls == 1
    for series in answers:
        assert _value(series, "vmapi_machine_stats_partial", host="h1") == 0.0


def test_take_answers_each_host_with_the_time_of_its_call_for_kubectl_vm_top() -> None:
    identity, stats = _machine("a", "vm1", "u-1")
    host = FakeHost([stats])
    broken = FakeHost([])
    broken.fail = RetryableError("libvirtd restarting")
    sources = [
        HostSource("h1", host, lambda: [identity]),
        HostSource("h2", broken, list),
    ]
    collector = MachineStatsCollector(lambda: sources, deadline=5.0)
    before = time.time()
    answers = {source.host: (answer, at) for source, answer, at in collector.take(sources)}
    after = time.time()
    assert answers["h1"][0] == [stats]
    assert before <= answers["h1"][1] <= after
    assert answers["h2"][0] is None
    assert host.calls == 1
    # A second sample is a call of its own, taken later.
    again = {s.host: at for s, _answer, at in collector.take(sources[:1])}
    assert host.calls == 2
    assert again["h1"] > answers["h1"][1]


def _through_client(collector: Collector) -> str:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(collector)
    return generate_latest(registry).decode()


def _without_durations(text: str) -> list[str]:
    """The lines but the scrape's own duration, which differs from one scrape to the next."""
    return sorted(line for line in text.splitlines() if "_scrape_seconds{" not in line)


def test_the_text_served_is_what_prometheus_client_would_write() -> None:
    """/metrics writes these families itself (cheaper than prometheus_client's exposition):
    line for line the same text, HELP and TYPE of families without samples included."""
    web, web_stats = _machine("team", "web", "u1")
    quoted = MachineIdentity("team", 'odd"name\\x', "u3")
    quoted_stats = DomainStats("u3", "d3", {"state.state": 3, "balloon.rss": 2_000_000})
    host = FakeHost([web_stats, quoted_stats])
    down = FakeHost([])
    down.fail = RetryableError("libvirtd restarting")
    sources = [
        HostSource(
            "h1",
            host,
            lambda: [web, quoted],
            lambda: [("PoweredOn", "Running"), ("PoweredOff", "None")],
            lambda: {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            lambda: [MachineReadiness("team", "web", True, "PoweredOn")],
        ),
        HostSource("h2", down, list),
    ]
    stats = MachineStatsCollector(lambda: sources, deadline=5.0)
    state = HostStateCollector(lambda: sources, lambda: False)
    for collector in (stats, state):
        served = collector.text()
        assert _without_durations(served) == _without_durations(_through_client(collector))
    assert 'vmapi_machine_memory_rss_bytes{host="h1",name="odd\\"name\\\\x"' in stats.text()
    # Both hosts have their scrape figures; the one down is partial.
    assert _value(_scrape(stats), "vmapi_machine_stats_partial", host="h2") == 1.0
    assert _value(_scrape(state), "vmapi_generic_leader") == 0.0


def test_the_body_served_is_the_registry_then_the_collectors_text() -> None:
    served: list[str] = []
    exposition.register_text(lambda: "# HELP vmapi_test_text_only x\n" if not served else "")
    body = exposition.body().decode()
    assert "python_gc_objects_collected_total" in body  # the registry's
    assert body.index("python_gc_objects_collected_total") < body.index("vmapi_test_text_only")
    served.append("done")  # serves nothing from now on
