"""Asking the other daemons for their hosts' statistics, for a `kubectl vm top` list.

Why a module of its own: the console endpoint relays a hop's bytes both ways for one machine
(`hop_relay.py`); a list instead needs short request-and-answer calls to several daemons at once,
each bounded, whose answers this daemon merges (`console/stats_fanout.py` decides what to ask and
how answers join). The calls go over the same mutual TLS as every hop, to the address each host's
daemon publishes in the host's heartbeat Lease.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import ssl
import threading
import time
from typing import Any

from generic.adapters.kubeclient import API_ERRORS, ApiFailure, KubeApi, failure_of
from libvirt_provider import constants as c
from libvirt_provider.adapters.host.agent import heartbeat_lease_name
from libvirt_provider.console.auth import Identity, Refusal
from libvirt_provider.console.hop import hop_request_head, hop_target
from libvirt_provider.console.stats import StatsRoute
from libvirt_provider.console.stats_fanout import host_list_path, parse_answer

__all__ = ["StatsFanout"]

log = logging.getLogger(__name__)

# The largest answer read from another daemon (a list of thousands of machines is well under).
_MAX_ANSWER = 64 << 20


class StatsFanout:
    """The machines' hosts as the API server knows them, and the other daemons' answers."""

    def __init__(self, kube: KubeApi, hop_client: ssl.SSLContext, lease_namespace: str) -> None:
        self._kube = kube
        self._hop_client = hop_client
        self._lease_namespace = lease_namespace

    def machine_hosts(self, route: StatsRoute) -> list[tuple[str, str | None]]:
        """Each LibvirtMachine's namespace and host, of the route's namespace or every one.
        Raises the API's error (the caller answers 503)."""
        if route.namespace is not None:
            found = self._kube.list_namespaced_custom_object(
                c.GROUP,
                c.VERSION,
                route.namespace,
                c.MACHINE_PLURAL,
                _request_timeout=c.CONSOLE_API_TIMEOUT,
            )
        else:
            found = self._kube.list_cluster_custom_object(
                c.GROUP, c.VERSION, c.MACHINE_PLURAL, _request_timeout=c.CONSOLE_API_TIMEOUT
            )
        machines: list[tuple[str, str | None]] = []
        for item in found.get("items") or []:
            host = (item.get("spec") or {}).get("host")
            namespace = str((item.get("metadata") or {}).get("namespace"))
            machines.append((namespace, host if isinstance(host, str) and host else None))
        return machines

    def ask(
        self, hosts: list[str], route: StatsRoute, identity: Identity
    ) -> dict[str, dict[str, Any] | None]:
        """Each host's daemon's list for `route` narrowed to that host, all asked at once; None
        for a host whose daemon gave no list within `STATS_FANOUT_SECONDS`."""
        answers: dict[str, dict[str, Any] | None] = {}
        lock = threading.Lock()

        def one(host: str) -> None:
            answer = self._ask_one(host, route, identity)
            with lock:
                answers[host] = answer

        threads = [
            threading.Thread(target=one, args=(h,), name=f"top-{h}", daemon=True) for h in hosts
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + c.STATS_FANOUT_SECONDS
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with lock:
            late = [h for h in hosts if h not in answers]
            if late:
                log.warning(
                    "console: %s's list: no answer within %.0f s from the daemons of %s",
                    identity.user,
                    c.STATS_FANOUT_SECONDS,
                    ", ".join(late),
                )
            return {h: answers.get(h) for h in hosts}

    def _ask_one(self, host: str, route: StatsRoute, identity: Identity) -> dict[str, Any] | None:
        try:
            lease = self._kube.read_namespaced_lease(
                heartbeat_lease_name(host),
                self._lease_namespace,
                _request_timeout=c.CONSOLE_API_TIMEOUT,
            )
        except API_ERRORS as err:
            if failure_of(err) is not ApiFailure.NOT_FOUND:
                log.warning("console: cannot read host %s's heartbeat Lease: %s", host, err)
                return None
            lease = None
        target = hop_target(host, lease, dt.datetime.now(dt.UTC))
        if isinstance(target, Refusal):
            log.info(
                "console: %s's list leaves host %s out: %s", identity.user, host, target.message
            )
            return None
        path = host_list_path(route, host)
        head = hop_request_head(
            "GET", path, [("Accept", "application/json")], identity, target.authority
        )
        try:
            with (
                socket.create_connection(
                    (target.address, target.port), timeout=c.HOP_CONNECT_TIMEOUT
                ) as raw,
                self._hop_client.wrap_socket(raw, server_hostname=c.HOP_PEER_NAME) as tls,
            ):
                tls.settimeout(c.STATS_FANOUT_SECONDS)
                tls.sendall(head)
                data = _read_all(tls)
        except (OSError, ssl.SSLError) as err:
            log.warning(
                "console: %s's list: host %s's daemon at %s: %s",
                identity.user,
                host,
                target.authority,
                err,
            )
            return None
        answer = parse_answer(data)
        if isinstance(answer, str):
            log.warning("console: host %s's daemon answered the list with %s", host, answer)
            return None
        code, body = answer
        if code != 200 or body.get("kind") != c.STATS_LIST_KIND:
            log.info(
                "console: host %s's daemon refused %s's list: %d %s",
                host,
                identity.user,
                code,
                body.get("message", ""),
            )
            return None
        return body


def _read_all(tls: ssl.SSLSocket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size <= _MAX_ANSWER:
        chunk = tls.recv(c.HOP_READ_CHUNK)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
