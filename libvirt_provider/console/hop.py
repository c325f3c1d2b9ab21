"""The hop between daemons: which daemon serves a machine's host, whether a request may go there,
and what it carries (docs/console.md, "Routing").

The APIService's Service reaches any daemon. The one a request reaches authenticates the front
proxy, runs the user's SubjectAccessReview and reads the machine; when the machine's host is one
it does not serve, it forwards the whole request to the daemon that does, found through the
address that daemon publishes in the host's heartbeat Lease (`HOP_ADDRESS_ANNOTATION`). The hop
is mutual TLS: both ends present a certificate signed by the console CA (`--console-hop-ca-file`)
that names `HOP_PEER_NAME`. The target believes the `X-Remote-*` headers of a hop only on such a
connection, and runs its own SubjectAccessReview. A request that came by hop is never forwarded
again: one hop at most, so no loop.

Pure: the shell (`adapters/process/console_server.py`, `hop_relay.py`) reads the Lease, dials,
relays bytes, and puts what it learnt to these functions.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from generic.formats import parse_micro_time
from libvirt_provider import constants as c
from libvirt_provider.console.auth import (
    FrontProxyTrust,
    Identity,
    Refusal,
    authenticate,
)

__all__ = [
    "HOP_TRUST",
    "HopTarget",
    "certificate_names",
    "format_hop_address",
    "hop_host",
    "hop_identity",
    "hop_request_head",
    "hop_target",
    "no_second_hop",
    "parse_hop_address",
]

_USER = "X-Remote-User"
_GROUP = "X-Remote-Group"
_EXTRA = "X-Remote-Extra-"

# How the target reads a hop's user: fixed header names, whatever the API server's front proxy
# uses (the sender re-encodes the identity it authenticated; it never passes the client's headers).
HOP_TRUST = FrontProxyTrust(
    client_ca="", username_headers=(_USER,), group_headers=(_GROUP,), extra_prefixes=(_EXTRA,)
)

# The request's headers a hop passes on: what the WebSocket upgrade and the answer's type need.
# Everything else (the front proxy's X-Remote-*, Authorization, cookies, hop-by-hop headers other
# than the upgrade's) stays behind.
_PASSED = frozenset(
    {
        "upgrade",
        "connection",
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-protocol",
        "accept",
        "user-agent",
    }
)


@dataclass(frozen=True)
class HopTarget:
    """The daemon serving `host`: where it takes hops."""

    host: str
    address: str
    port: int

    @property
    def authority(self) -> str:
        return format_hop_address(self.address, self.port)


def format_hop_address(address: str, port: int) -> str:
    """`ADDRESS:PORT`, an IPv6 address in brackets."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def parse_hop_address(text: object) -> tuple[str, int] | None:
    """The address and port of `format_hop_address`'s text; None for anything else. Only IP
    addresses: a name would make every hop depend on a resolver the pod may not share."""
    if not isinstance(text, str):
        return None
    if text.startswith("["):
        address, sep, port = text[1:].partition("]:")
    else:
        address, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return None
    if ":" in address and not text.startswith("["):
        return None
    return address, int(port)


def hop_host(machine: Mapping[str, Any] | None, served_hosts: frozenset[str]) -> str | None:
    """The host a request for `machine` must hop to, or None when it is answered here (the
    machine is missing, has no host yet, or its host is one this daemon serves). The host is the
    immutable `spec.host`, never the status, which other writers may change."""
    if machine is None:
        return None
    host = (machine.get("spec") or {}).get("host")
    if not isinstance(host, str) or not host or host in served_hosts:
        return None
    return host


def no_second_hop(name: str, host: str) -> Refusal:
    """The answer to a request that came by hop for a machine this daemon does not serve either
    (the Lease moved meanwhile, or two daemons disagree): never forwarded again."""
    return Refusal(
        503,
        "ServiceUnavailable",
        f"LibvirtMachine {name} runs on host {host}, which this daemon does not serve either; "
        "the request already hopped once and is not forwarded again",
    )


def hop_target(host: str, lease: Mapping[str, Any] | None, now: dt.datetime) -> HopTarget | Refusal:
    """Where the daemon serving `host` takes hops, from the host's heartbeat Lease, or why no hop
    can reach it (503, the reason readable by the user)."""
    if lease is None:
        return Refusal(
            503,
            "ServiceUnavailable",
            f"host {host} has no heartbeat Lease: no daemon serves it",
        )
    spec = lease.get("spec") or {}
    renewed = parse_micro_time(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    grace = float(duration) if isinstance(duration, int) and duration > 0 else None
    limit = grace if grace is not None else c.HEARTBEAT_GRACE_SECONDS
    if renewed is None or (now - renewed).total_seconds() > limit:
        since = f"{(now - renewed).total_seconds():.0f} s ago" if renewed else "never"
        return Refusal(
            503,
            "ServiceUnavailable",
            f"the daemon serving host {host} last renewed its heartbeat {since}: it is down or "
            "cut off, so its machines' consoles cannot be reached",
        )
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    published = annotations.get(c.HOP_ADDRESS_ANNOTATION)
    if published is None:
        return Refusal(
            503,
            "ServiceUnavailable",
            f"the daemon serving host {host} takes no hops (started without --console-hop-port)",
        )
    found = parse_hop_address(published)
    if found is None:
        return Refusal(
            503,
            "ServiceUnavailable",
            f"the daemon serving host {host} publishes a hop address that is not ADDRESS:PORT: "
            f"{str(published)[:64]!r}",
        )
    return HopTarget(host=host, address=found[0], port=found[1])


def hop_request_head(
    method: str,
    path: str,
    headers: Iterable[tuple[str, str]],
    identity: Identity,
    authority: str,
) -> bytes:
    """The request as the target daemon receives it: the same method and path, the upgrade's
    headers, and the identity this daemon authenticated (one header per group; the keys of extra
    attributes percent-encoded, as the API server's front proxy does)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {authority}"]
    lines += [f"{k}: {v}" for k, v in headers if k.lower() in _PASSED and _clean(v)]
    lines.append(f"{_USER}: {identity.user}")
    lines += [f"{_GROUP}: {group}" for group in identity.groups]
    for key, values in sorted(identity.extra.items()):
        lines += [f"{_EXTRA}{urllib.parse.quote(key, safe='')}: {v}" for v in values]
    if not all(_clean(line) for line in lines):
        raise ValueError("a header of the hop would hold a line break")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _clean(text: str) -> bool:
    return "\r" not in text and "\n" not in text


def certificate_names(cert: Mapping[str, Any] | None) -> frozenset[str]:
    """The DNS names of a verified peer certificate (`SSLSocket.getpeercert()`'s form)."""
    if not cert:
        return frozenset()
    return frozenset(str(value) for kind, value in cert.get("subjectAltName", ()) if kind == "DNS")


def hop_identity(
    peer_names: frozenset[str], headers: Iterable[tuple[str, str]]
) -> Identity | Refusal:
    """Who a hop carries. `peer_names` are the names of the client certificate TLS verified
    against the console CA; without `HOP_PEER_NAME` among them no header is believed."""
    if c.HOP_PEER_NAME not in peer_names:
        return Refusal(
            401,
            "Unauthorized",
            f"the hop's client certificate does not name {c.HOP_PEER_NAME}",
        )
    found = authenticate(HOP_TRUST, c.HOP_PEER_NAME, headers, need_user=True)
    assert found is not None  # need_user: a user or a refusal
    return found
