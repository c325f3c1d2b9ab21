"""`kubectl vm top`'s lists across daemons: which hosts' daemons a list must ask, what it sends
them, and how their answers join the list (docs/console.md, "kubectl vm top").

A daemon holds the statistics of its own hosts only. A list (a namespace's, every namespace's,
one host's) that reaches it asks, once each and at the same time, the daemon serving every other
host where a machine of a namespace the caller may read runs: the same list, narrowed to that host
(`fieldSelector=spec.host=H`), over the hop between daemons, for the user this daemon
authenticated (the target reviews the user again). A host whose daemon cannot be reached, or does
not answer in time, is named in `partialHosts`, as a host that did not answer a local call is:
the list never waits past its deadline and never fails for one host.

Pure: the shell (`adapters/process/console_server.py`) lists the machines, dials, and puts what
it learnt to these functions.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.console.stats import StatsRoute

__all__ = ["host_list_path", "hosts_to_ask", "merge_lists", "parse_answer"]

_PREFIX = f"/apis/{c.SUBRESOURCE_GROUP}/{c.SUBRESOURCE_VERSION}"


def hosts_to_ask(
    machines: Iterable[tuple[str, str | None]],
    served: frozenset[str],
    allowed: Mapping[str, bool],
    route: StatsRoute,
) -> list[str]:
    """The hosts other daemons serve that hold a machine the list shows: of `machines` (each
    machine's namespace and host), those of an allowed namespace, on a host not `served` here
    (and the route's host, when it names one)."""
    return sorted(
        {
            host
            for namespace, host in machines
            if host
            and host not in served
            and allowed.get(namespace, False)
            and (route.host is None or host == route.host)
            and (route.namespace is None or namespace == route.namespace)
        }
    )


def host_list_path(route: StatsRoute, host: str) -> str:
    """The list `route` asks for, narrowed to `host`: what its daemon is sent."""
    where = f"/namespaces/{route.namespace}" if route.namespace is not None else ""
    query = urllib.parse.urlencode({"fieldSelector": f"{c.STATS_HOST_FIELD}={host}"})
    return f"{_PREFIX}{where}/{c.STATS_RESOURCE}?{query}"


def parse_answer(raw: bytes) -> tuple[int, dict[str, Any]] | str:
    """The status code and JSON body of a whole HTTP/1.1 answer (the daemon closes after it);
    a string saying what is wrong with anything else."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return f"an incomplete answer ({len(raw)} bytes)"
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        return f"not an HTTP answer: {status_line[:80]!r}"
    length: int | None = None
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            length = int(value.strip())
    if length is not None and len(body) < length:
        return f"a body cut short ({len(body)} of {length} bytes)"
    try:
        document = json.loads(body[:length] if length is not None else body)
    except ValueError:
        return "a body that is not JSON"
    if not isinstance(document, dict):
        return "a body that is not a JSON object"
    return int(parts[1]), document


def merge_lists(
    local: Mapping[str, Any], answers: Mapping[str, Mapping[str, Any] | None]
) -> dict[str, Any]:
    """`local` (a list document) with the items of each host's `answers` (None: the host's
    daemon gave none), sorted as a list is; the hosts that did not answer join `partialHosts`,
    with the hosts the answering daemons name there."""
    items = list(local.get("items") or [])
    partial = set(local.get("partialHosts") or [])
    for host, answer in answers.items():
        if answer is None:
            partial.add(host)
            continue
        # Only the asked host's machines: a daemon answering for another host is ignored.
        items += [i for i in answer.get("items") or [] if i.get("host") == host]
        partial.update(h for h in answer.get("partialHosts") or [] if h == host)
    items.sort(key=lambda i: (i["metadata"]["namespace"], i["metadata"]["name"]))
    return {**local, "items": items, "partialHosts": sorted(partial)}
