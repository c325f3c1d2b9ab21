"""The console endpoint's paths, its discovery documents, and which machine a request may reach.

Pure: the shell matches a request's path here, serves the discovery documents as they are, and
puts the machine it read (or its absence) to `console_target`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from libvirt_provider import constants as c
from libvirt_provider.console.auth import Refusal

__all__ = [
    "ConsoleRoute",
    "ConsoleTarget",
    "console_target",
    "discovery_document",
    "match_route",
]

_PREFIX = f"/apis/{c.SUBRESOURCE_GROUP}/{c.SUBRESOURCE_VERSION}"
_NAME = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
_ROUTE = re.compile(
    rf"^{re.escape(_PREFIX)}/namespaces/(?P<ns>{_NAME})/{c.CONSOLE_RESOURCE}/(?P<name>{_NAME})"
    rf"/(?P<sub>[a-z]+)$"
)
# Subresources served as WebSockets (`vnc/screenshot` is matched by `console/vnc.py`).
SERVED_SUBRESOURCES: tuple[str, ...] = (c.CONSOLE_SUBRESOURCE, c.VNC_SUBRESOURCE)
# Power states in which the guest's serial console can be opened.
_CONSOLE_STATES = frozenset({"PoweredOn", "Paused"})


@dataclass(frozen=True)
class ConsoleRoute:
    namespace: str
    name: str
    subresource: str


def match_route(path: str) -> ConsoleRoute | None:
    """The machine and subresource a path names, or None for any other path."""
    found = _ROUTE.match(path.split("?", 1)[0])
    if found is None or found.group("sub") not in SERVED_SUBRESOURCES:
        return None
    return ConsoleRoute(found.group("ns"), found.group("name"), found.group("sub"))


def discovery_document(path: str) -> bytes | None:
    """The discovery document served at `path` (what the aggregator reads to mark the
    APIService Available and to publish the group), or None."""
    version = {"groupVersion": f"{c.SUBRESOURCE_GROUP}/{c.SUBRESOURCE_VERSION}",
               "version": c.SUBRESOURCE_VERSION}  # fmt: skip
    group = {"name": c.SUBRESOURCE_GROUP, "versions": [version], "preferredVersion": version}
    clean = path.split("?", 1)[0].rstrip("/")
    body: dict[str, Any]
    if clean == "/apis":
        body = {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}
    elif clean == f"/apis/{c.SUBRESOURCE_GROUP}":
        body = {"kind": "APIGroup", "apiVersion": "v1", **group}
    elif clean == _PREFIX:
        body = {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": version["groupVersion"],
            "resources": [
                {
                    "name": f"{c.CONSOLE_RESOURCE}/{sub}",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "LibvirtMachine",
                    "verbs": ["get"],
                }
                for sub in SERVED_SUBRESOURCES
            ]
            + [
                # Port-forward's path has one more segment (the port): console/portforward.py.
                {
                    "name": f"{c.CONSOLE_RESOURCE}/{c.PORTFORWARD_SUBRESOURCE}",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "LibvirtMachine",
                    "verbs": ["get"],
                }
            ]
            + [
                {
                    "name": c.STATS_RESOURCE,
                    "singularName": "",
                    "namespaced": True,
                    "kind": c.STATS_KIND,
                    "verbs": ["get", "list"],
                }
            ],
        }
    else:
        return None
    return json.dumps(body).encode("utf-8")


@dataclass(frozen=True)
class ConsoleTarget:
    """The domain a console request reaches, on a host this daemon serves."""

    host: str
    domain_uuid: str


def console_target(
    route: ConsoleRoute, machine: Mapping[str, Any] | None, served_hosts: frozenset[str]
) -> ConsoleTarget | Refusal:
    """Where the machine's console is, or why it cannot be opened here."""
    if machine is None:
        return Refusal(
            404,
            "NotFound",
            f'libvirtmachines.infrastructure.vm-api.io "{route.name}" not found',
        )
    status = machine.get("status") or {}
    # Which domain, and where, come from what no status writer can change: the domain's UUID is
    # the machine's uid, and `spec.host` is immutable once set. The status only says whether the
    # domain was built yet and whether it runs.
    uuid = (machine.get("metadata") or {}).get("uid")
    host = (machine.get("spec") or {}).get("host")
    built = (status.get("providerMetadata") or {}).get("domainUUID")
    if not uuid or not host or not built:
        return Refusal(
            409, "Conflict", f"LibvirtMachine {route.name} has no domain yet (still being created)"
        )
    if host not in served_hosts:
        return Refusal(
            503,
            "ServiceUnavailable",
            f"LibvirtMachine {route.name} runs on host {host}, which this daemon does not serve",
        )
    power = status.get("powerState")
    if power not in _CONSOLE_STATES:
        return Refusal(
            409,
            "Conflict",
            f"LibvirtMachine {route.name} is {power or 'in transition'}: its console is open "
            "only while it runs",
        )
    return ConsoleTarget(host=str(host), domain_uuid=str(uuid))
