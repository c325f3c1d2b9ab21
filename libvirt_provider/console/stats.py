"""`kubectl vm top`'s resource on the aggregated endpoint: its paths, who may read what, and the
documents it answers with.

`libvirtmachinestats` (kind `LibvirtMachineStats`) is served like metrics.k8s.io's `pods` is
for `kubectl top`: `get` one machine's (`namespaces/{ns}/libvirtmachinestats/{name}`), `list` a
namespace's (`namespaces/{ns}/libvirtmachinestats`) or every namespace's (`libvirtmachinestats`),
optionally only one host's (`?fieldSelector=spec.host=NAME`).

Authorisation: the API server first checks RBAC on `libvirtmachinestats` in the aggregated group
(deploy/console-rbac.yaml's ClusterRole); the daemon then asks, with a SubjectAccessReview, the
question that decides: may this user read the LibvirtMachines themselves (`get` the named one,
`list` the namespace's)? A namespace that fails it is refused (403) when it was asked for, and
left out of an all-namespaces list, so the figures of a machine reach only those who may read
the machine.

Each item holds the counters of one sample (CPU seconds since the domain started, the balloon's
and the process' memory) and when it was taken: CPU use is a rate, which the client computes
from two samples (`console/top.py`).

Pure: the shell (`adapters/process/console_server.py`) matches the path, asks the reviews, takes
the samples and serves these documents.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.console.auth import Identity, Refusal
from libvirt_provider.driver.types import DomainStats
from libvirt_provider.metrics.machine_stats import machine_samples

__all__ = [
    "HostSample",
    "MayRead",
    "StatsRoute",
    "cannot_read",
    "encode",
    "match_stats_route",
    "missing_machine",
    "read_review",
    "readable_namespaces",
    "stats_document",
]

_PREFIX = f"/apis/{c.SUBRESOURCE_GROUP}/{c.SUBRESOURCE_VERSION}"
_NAME = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
_ROUTE = re.compile(
    rf"^{re.escape(_PREFIX)}(/namespaces/(?P<ns>{_NAME}))?/{c.STATS_RESOURCE}"
    rf"(/(?P<name>{_NAME}))?$"
)
# The families of `metrics.machine_stats` an item reports, and its field for each.
_FIELDS = {
    f"{c.METRICS_PREFIX}_machine_cpu_seconds": "cpuSeconds",
    f"{c.METRICS_PREFIX}_machine_vcpus": "vcpus",
    f"{c.METRICS_PREFIX}_machine_memory_actual_bytes": "memoryBytes",
    f"{c.METRICS_PREFIX}_machine_memory_rss_bytes": "memoryRSSBytes",
    f"{c.METRICS_PREFIX}_machine_memory_available_bytes": "memoryAvailableBytes",
    f"{c.METRICS_PREFIX}_machine_memory_unused_bytes": "memoryUnusedBytes",
}
_RUNNING = 1  # libvirt's VIR_DOMAIN_RUNNING


@dataclass(frozen=True)
class StatsRoute:
    """What a request asks for: one machine (`name`), a namespace's machines (`namespace`), or
    every namespace's (neither); `host` keeps only that host's."""

    namespace: str | None
    name: str | None
    host: str | None

    @property
    def verb(self) -> str:
        return "get" if self.name is not None else "list"


def match_stats_route(path: str) -> StatsRoute | Refusal | None:
    """The route of a stats path; a Refusal for a query it cannot answer; None for any other
    path."""
    clean, _, query = path.partition("?")
    found = _ROUTE.match(clean)
    if found is None:
        return None
    host: str | None = None
    for key, value in urllib.parse.parse_qsl(query):
        if key != "fieldSelector" or not value:
            continue
        field, sep, wanted = value.partition("=")
        if field.endswith("="):  # `spec.host==NAME`, as kubectl also takes it
            field = field[:-1]
        if not sep or field != c.STATS_HOST_FIELD or not wanted or "," in wanted:
            return Refusal(
                400,
                "BadRequest",
                f"field selector {value!r} is not supported: only {c.STATS_HOST_FIELD}=NAME",
            )
        host = wanted.lstrip("=")
    return StatsRoute(found.group("ns"), found.group("name"), host)


def read_review(identity: Identity, verb: str, namespace: str, name: str | None) -> dict[str, Any]:
    """The SubjectAccessReview asking whether `identity` may `verb` (get, list) LibvirtMachines
    in `namespace` (every namespace when empty), the named one for a get."""
    attributes: dict[str, Any] = {
        "namespace": namespace,
        "verb": verb,
        "group": c.GROUP,
        "version": c.VERSION,
        "resource": c.MACHINE_PLURAL,
    }
    if name is not None:
        attributes["name"] = name
    spec: dict[str, Any] = {
        "user": identity.user,
        "groups": list(identity.groups),
        "resourceAttributes": attributes,
    }
    if identity.extra:
        spec["extra"] = {k: list(v) for k, v in identity.extra.items()}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def cannot_read(identity: Identity, verb: str, namespace: str, reason: str = "") -> Refusal:
    """The 403 for a user who may not read the LibvirtMachines whose figures they asked for,
    worded as the API server words its own."""
    message = (
        f'User "{identity.user}" cannot {verb} resource "{c.MACHINE_PLURAL}" in API group '
        f'"{c.GROUP}" in the namespace "{namespace}"'
    )
    if reason:
        message += f": {reason}"
    return Refusal(403, "Forbidden", message)


MayRead = Callable[[str, str, str | None], bool]
"""Whether the caller may (verb, namespace, name) LibvirtMachines: a SubjectAccessReview."""


def readable_namespaces(
    identity: Identity, route: StatsRoute, namespaces: Iterable[str], may_read: MayRead
) -> dict[str, bool] | Refusal:
    """Which namespaces' machines the caller may see, asking `may_read` as little as it can:
    the namespace asked for (a 403 if not); for every namespace, all at once when the caller may
    list LibvirtMachines cluster-wide, else each namespace that holds one of the machines."""
    if route.namespace is not None:
        if not may_read(route.verb, route.namespace, route.name):
            return cannot_read(identity, route.verb, route.namespace)
        return {route.namespace: True}
    wanted = sorted(set(namespaces))
    if may_read("list", "", None):
        return dict.fromkeys(wanted, True)
    return {ns: may_read("list", ns, None) for ns in wanted}


@dataclass(frozen=True)
class HostSample:
    """One host's bulk statistics as a request saw them: the machines the daemon holds on it
    (namespace, name, domain UUID), the records (None when the host did not answer in time),
    and when they were taken (Unix seconds, the middle of the call)."""

    host: str
    machines: tuple[tuple[str, str, str], ...]
    records: tuple[DomainStats, ...] | None
    taken_at: float


def _item(namespace: str, name: str, host: str, taken_at: float | None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "kind": c.STATS_KIND,
        "apiVersion": f"{c.SUBRESOURCE_GROUP}/{c.SUBRESOURCE_VERSION}",
        "metadata": {"namespace": namespace, "name": name},
        "host": host,
        "running": False,
    }
    if taken_at is not None:
        item["timestamp"] = datetime.fromtimestamp(taken_at, UTC).isoformat(timespec="milliseconds")
        item["sampledAt"] = taken_at
    return item


def _items(sample: HostSample, route: StatsRoute) -> Iterable[dict[str, Any]]:
    by_uuid = {r.uuid.lower(): r for r in sample.records or ()}
    for namespace, name, uid in sample.machines:
        if route.namespace is not None and namespace != route.namespace:
            continue
        if route.name is not None and name != route.name:
            continue
        item = _item(namespace, name, sample.host, sample.taken_at if sample.records else None)
        record = by_uuid.get(uid.lower()) if uid else None
        if record is not None:
            for s in machine_samples(record, host=sample.host, namespace=namespace, name=name):
                if s.family.name == f"{c.METRICS_PREFIX}_machine_domain_state":
                    item["running"] = s.value == _RUNNING
                elif s.family.name in _FIELDS:
                    item[_FIELDS[s.family.name]] = s.value
        yield item


def stats_document(
    route: StatsRoute,
    samples: Iterable[HostSample],
    allowed: Mapping[str, bool],
) -> tuple[int, dict[str, Any]]:
    """The answer (HTTP code, body) to `route` from the hosts' samples, keeping only machines of
    namespaces `allowed` says may be read (a namespace it lacks is not allowed). A machine the
    daemon holds but whose domain has no record (not running, or its host did not answer) is
    listed with `running: false` and no figures; `partialHosts` names the hosts that did not
    answer."""
    samples = list(samples)
    if route.host is not None:
        samples = [s for s in samples if s.host == route.host]
    items = [
        item
        for sample in samples
        for item in _items(sample, route)
        if allowed.get(item["metadata"]["namespace"], False)
    ]
    partial = sorted(s.host for s in samples if s.records is None)
    if route.name is not None:
        if not items:
            return 404, {}
        item = items[0]
        if item["host"] in partial:
            item["partial"] = True
        return 200, item
    items.sort(key=lambda i: (i["metadata"]["namespace"], i["metadata"]["name"]))
    body = {
        "kind": c.STATS_LIST_KIND,
        "apiVersion": f"{c.SUBRESOURCE_GROUP}/{c.SUBRESOURCE_VERSION}",
        "metadata": {},
        "items": items,
        "partialHosts": partial,
    }
    return 200, body


def missing_machine(route: StatsRoute, machine: Mapping[str, Any] | None) -> Refusal:
    """Why a machine the daemon does not hold has no figures here: it does not exist (404), has
    no host yet (409), or runs on a host this daemon does not serve (503, as the console)."""
    if machine is None:
        return Refusal(404, "NotFound", f'{c.MACHINE_PLURAL}.{c.GROUP} "{route.name}" not found')
    host = (machine.get("spec") or {}).get("host")
    if not host:
        return Refusal(409, "Conflict", f"LibvirtMachine {route.name} has no host yet")
    return Refusal(
        503,
        "ServiceUnavailable",
        f"LibvirtMachine {route.name} runs on host {host}, which this daemon does not serve",
    )


def encode(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body).encode("utf-8")
