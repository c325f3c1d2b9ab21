"""The daemon's aggregated API endpoint: `subresources.infrastructure.vm-api.io/v1alpha1`, served
to the kube-apiserver's aggregation layer on a TLS port of its own (docs/console.md).

Per connection, one thread; per request, in this order (the decisions are `console/auth.py`'s):

1. TLS accepts a client without a certificate (the APIService's availability probe, scanners) and
   verifies any certificate against the requestheader client CA that the API server publishes in
   `kube-system/extension-apiserver-authentication` (read at start and every
   `AUTHENTICATION_REFRESH_SECONDS`; a certificate from another CA fails the handshake, logged);
2. no request is served without such a certificate whose name is an allowed one; only then are
   the `X-Remote-*` headers believed;
3. discovery documents are served to the front proxy; a console request also needs a user, and a
   SubjectAccessReview allowing `get` on `libvirtmachines/console` in the machine's namespace;
4. the machine must exist (404), have a domain on a host this daemon serves (409, 503) and run
   (409); one writer per machine (409 for a second, unless it takes over with `force`), any
   number of viewers (`console/sessions.py`, `console/sharing.py`);
5. the WebSocket upgrade (`plain.kubevirt.io`), then the bridge: the machine's shared console
   stream (`console_share.py` over `driver/libvirt_console.py`) to the socket and back, the last
   output replayed first, pings every `CONSOLE_PING_SECONDS`, idle timeouts, the session released
   the moment either side leaves. `?logs=true` sends the host's console log instead.

VNC (`libvirtmachines/vnc`, and `.../vnc/screenshot`, which the API server authorises as the
same subresource) goes through the same steps 1 to 4 for `get libvirtmachines/vnc`, then needs a
machine with `spec.console.graphics: VNC`; the session's bridge and the PNG answer are
`vnc_server.py`'s, the display's socket `driver/libvirt_graphics.py`'s.

`kubectl vm top`'s `libvirtmachinestats` (`console/stats.py`) goes through the same steps 1 and
2, then a SubjectAccessReview per namespace it answers for (may the user read its
LibvirtMachines?), then one bulk statistics call per host with a machine to show, shared with
/metrics' (`MachineStatsCollector.take`), bounded by the same deadline.

Nothing here logs a header other than the user's name, and never a certificate or token.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import queue
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from generic.adapters.events import EventRecorder
from generic.adapters.kubeclient import (
    API_ERRORS,
    ApiFailure,
    KubeApi,
    describe_failure,
    failure_of,
)
from generic.background import BackgroundLoop
from libvirt_provider import constants as c
from libvirt_provider.adapters.host.agent import heartbeat_lease_name
from libvirt_provider.adapters.process.console_keeper import ConsoleKeeper, KeptHost
from libvirt_provider.adapters.process.console_share import (
    ConsoleHub,
    SharedConsole,
    SharingSettings,
    read_tail,
)
from libvirt_provider.adapters.process.guest_dial import GuestDialer
from libvirt_provider.adapters.process.hop_relay import HopRelay
from libvirt_provider.adapters.process.machine_metrics import HostSource, MachineStatsCollector
from libvirt_provider.adapters.process.port_forward import PortBridge, switching_protocols
from libvirt_provider.adapters.process.stats_fanout import StatsFanout
from libvirt_provider.adapters.process.vnc_server import VncBridge, answer_png, choose_subprotocol
from libvirt_provider.adapters.runtime.websocket_mask import fast_mask
from libvirt_provider.console.audit import (
    attached,
    detached,
    taken_over,
    vnc_attached,
    vnc_detached,
)
from libvirt_provider.console.auth import (
    FrontProxyTrust,
    Identity,
    Refusal,
    authenticate,
    forbidden,
    status_body,
    subject_access_review,
    trust_from_configmap,
)
from libvirt_provider.console.framing import (
    CloseCode,
    FrameReader,
    Opcode,
    ProtocolError,
    close_payload,
    encode_frame,
)
from libvirt_provider.console.hop import (
    HopTarget,
    certificate_names,
    hop_host,
    hop_identity,
    hop_request_head,
    hop_target,
    no_second_hop,
)
from libvirt_provider.console.portforward import (
    PortForwardRoute,
    match_portforward_route,
    portforward_subprotocol,
    portforward_target,
)
from libvirt_provider.console.routes import (
    ConsoleRoute,
    ConsoleTarget,
    console_target,
    discovery_document,
    match_route,
)
from libvirt_provider.console.sessions import VIEWER, WRITER, Seat, SessionRegistry, WriterBusyError
from libvirt_provider.console.sharing import (
    CLIENT_GONE_REASON,
    LOGS_END_REASON,
    ConsoleOptions,
    OutputDecision,
    console_options,
    idle_expired,
    input_pieces,
    logs_target,
    on_output,
    ping_due,
)
from libvirt_provider.console.stats import (
    HostSample,
    StatsRoute,
    encode,
    match_stats_route,
    missing_machine,
    read_review,
    readable_namespaces,
    stats_document,
)
from libvirt_provider.console.stats_fanout import hosts_to_ask, merge_lists
from libvirt_provider.console.vnc import (
    ImageError,
    match_screenshot_route,
    screenshot_png,
    vnc_refusal,
)
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor
from libvirt_provider.driver.types import DomainStats
from libvirt_provider.errors import ProviderError
from libvirt_provider.naming import console_log_file, machine_domain_name

__all__ = ["ConsoleServer", "ConsoleSettings", "HopSettings"]

log = logging.getLogger(__name__)

# Reading the front proxy's trust fails with the API's errors, or on a malformed ConfigMap.
_TRUST_ERRORS: tuple[type[Exception], ...] = (*API_ERRORS, ValueError)


@dataclass(frozen=True)
class HopSettings:
    """The hop between daemons (docs/console.md, "Routing"): the port other daemons' hops come
    in on, the CA both ends' certificates must verify against, and the namespace of the heartbeat
    Leases that say where each host's daemon takes them."""

    port: int
    ca_file: str
    lease_namespace: str


@dataclass(frozen=True)
class ConsoleSettings:
    address: str
    port: int
    cert_file: str
    key_file: str
    hop: HopSettings | None = None


class _Request:
    def __init__(
        self, method: str, path: str, headers: list[tuple[str, str]], rest: bytes = b""
    ) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        # Bytes read past the head (a hop passes them on).
        self.rest = rest

    def header(self, name: str) -> str:
        low = name.lower()
        return next((v.strip() for k, v in self.headers if k.lower() == low), "")

    def tokens(self, name: str) -> list[str]:
        return [t.strip().lower() for t in self.header(name).split(",") if t.strip()]


class _RefusedError(Exception):
    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


class _HopNeededError(Exception):
    """The request was authorized here, but the machine's host is another daemon's."""

    def __init__(self, name: str, host: str) -> None:
        super().__init__(f"{name} on {host}")
        self.name = name
        self.host = host


class ConsoleServer:
    def __init__(
        self,
        settings: ConsoleSettings,
        api: client.ApiClient,
        hosts: Callable[[], list[tuple[str, LibvirtHypervisor]]],
        *,
        stats_sources: Callable[[], list[HostSource]] = list,
        stats: MachineStatsCollector | None = None,
        sharing: SharingSettings | None = None,
        dialer: GuestDialer | None = None,
        kept_hosts: Callable[[], list[KeptHost]] | None = None,
    ) -> None:
        self._settings = settings
        self._sharing = sharing or SharingSettings()
        self._hub = ConsoleHub(self._sharing)
        # Remote hosts' logs (their qemu's files are out of reach): kept by this daemon.
        self._keeper = (
            ConsoleKeeper(
                self._hub, kept_hosts, folder=self._sharing.log_dir, limit=self._sharing.log_bytes
            )
            if kept_hosts is not None and self._sharing.log_dir is not None
            else None
        )
        # Each writer's session, so one that is taken over can be told and ended.
        self._writer_bridges: dict[Seat, _Bridge] = {}
        self._dialer = dialer or GuestDialer()
        self._kube = KubeApi(api)
        self._events = EventRecorder(
            api, component=c.CONSOLE_EVENT_COMPONENT, instance=socket.gethostname()
        )
        self._hosts = hosts
        self._stats_sources = stats_sources
        self._stats = stats
        self._sessions = SessionRegistry()
        self._trust: FrontProxyTrust | None = None
        self._context = self._make_context(None)
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(c.CONSOLE_MAX_CONNECTIONS)
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._hop_listener: socket.socket | None = None
        self._hop_accept_thread: threading.Thread | None = None
        self._hop_server, self._hop_client = self._hop_contexts(settings)
        self._fanout = (
            StatsFanout(self._kube, self._hop_client, settings.hop.lease_namespace)
            if self._hop_client is not None and settings.hop is not None
            else None
        )
        self._stopping = threading.Event()
        self._refresh = BackgroundLoop("console-trust", self._refresh_loop)
        # The sessions open now: stopping ends each (the client is told) before the daemon
        # closes its libvirt connections under their streams.
        self._bridges: set[_Bridge | VncBridge | PortBridge | HopRelay] = set()
        self._bridges_done = threading.Condition(self._lock)

    # -- life ------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._listener.getsockname()[1] if self._listener is not None else 0

    @property
    def hop_port(self) -> int:
        return self._hop_listener.getsockname()[1] if self._hop_listener is not None else 0

    def start(self) -> None:
        self._load_trust()
        self._listener, self._accept_thread = self._listen(self._settings.port, hopped=False)
        if self._settings.hop is not None:
            self._hop_listener, self._hop_accept_thread = self._listen(
                self._settings.hop.port, hopped=True
            )
        self._refresh.start()
        if self._keeper is not None:
            self._keeper.start()

    def _listen(self, port: int, *, hopped: bool) -> tuple[socket.socket, threading.Thread]:
        listener = socket.create_server((self._settings.address, port))
        listener.settimeout(1.0)
        thread = threading.Thread(
            target=self._accept_loop,
            args=(listener, hopped),
            name="console-hop-accept" if hopped else "console-accept",
            daemon=True,
        )
        thread.start()
        return listener, thread

    def problem(self) -> str | None:
        """The readiness check: why no request could be served now, or None. The Service behind
        the APIService routes only to ready daemons, so a daemon whose endpoint is down, or which
        cannot tell the API server's front proxy from anyone else, is left out of it."""
        if self._accept_thread is None or not self._accept_thread.is_alive():
            return "the console endpoint is not accepting connections"
        if self._settings.hop is not None and (
            self._hop_accept_thread is None or not self._hop_accept_thread.is_alive()
        ):
            return "the console endpoint's hop port is not accepting connections"
        with self._lock:
            trust = self._trust
        if trust is None:
            return (
                f"the front proxy's CA is not read yet ({c.AUTHENTICATION_CONFIGMAP_NAMESPACE}/"
                f"{c.AUTHENTICATION_CONFIGMAP}); console requests are refused"
            )
        return None

    def stop(self) -> None:
        self._stopping.set()
        if self._keeper is not None:
            # Before the hosts' connections close under the kept streams.
            self._keeper.stop()
        self._refresh.stop(5.0)
        for thread in (self._accept_thread, self._hop_accept_thread):
            if thread is not None:
                thread.join(5.0)
        for listener in (self._listener, self._hop_listener):
            if listener is not None:
                listener.close()
        with self._lock:
            open_now = list(self._bridges)
        for bridge in open_now:
            bridge.closed("the daemon is stopping")
        with self._bridges_done:
            self._bridges_done.wait_for(lambda: not self._bridges, timeout=5.0)

    def sessions(self) -> list[Seat]:
        return self._sessions.writers()

    # -- trust -----------------------------------------------------------------------------

    def _make_context(self, trust: FrontProxyTrust | None) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self._settings.cert_file, self._settings.key_file)
        if trust is None:
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx.load_verify_locations(cadata=trust.client_ca)
            # Optional: the availability probe and bare clients connect; `authenticate` refuses
            # every request that came without a verified certificate.
            ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    @staticmethod
    def _hop_contexts(
        settings: ConsoleSettings,
    ) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
        """TLS for hops: as a server, a client certificate from the console CA is required (the
        front proxy's CA is not trusted here); as a client, the target's certificate must verify
        against the same CA for `HOP_PEER_NAME`. Both ends present the serving certificate."""
        if settings.hop is None:
            return None, None
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.minimum_version = ssl.TLSVersion.TLSv1_2
        server.load_cert_chain(settings.cert_file, settings.key_file)
        server.load_verify_locations(cafile=settings.hop.ca_file)
        server.verify_mode = ssl.CERT_REQUIRED
        hop_client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        hop_client.minimum_version = ssl.TLSVersion.TLSv1_2
        hop_client.load_cert_chain(settings.cert_file, settings.key_file)
        hop_client.load_verify_locations(cafile=settings.hop.ca_file)
        return server, hop_client

    def _load_trust(self) -> None:
        try:
            cm = self._kube.read_namespaced_config_map(
                c.AUTHENTICATION_CONFIGMAP,
                c.AUTHENTICATION_CONFIGMAP_NAMESPACE,
                _request_timeout=c.CONSOLE_API_TIMEOUT,
            )
            trust = trust_from_configmap(cm.get("data") or {})
        except _TRUST_ERRORS as err:
            log.warning(
                "console: cannot read %s/%s (%s); requests are refused until it is read",
                c.AUTHENTICATION_CONFIGMAP_NAMESPACE,
                c.AUTHENTICATION_CONFIGMAP,
                describe_failure(err),
            )
            return
        if trust is None:
            log.warning("console: the API server publishes no front-proxy CA; nothing is served")
        with self._lock:
            if trust == self._trust:
                return
            context = self._make_context(trust)
            self._trust, self._context = trust, context
        log.info(
            "console: front-proxy trust loaded (allowed names: %s)",
            ", ".join(sorted(trust.allowed_names)) if trust else "none",
        )

    def _refresh_loop(self, loop: BackgroundLoop) -> None:
        while not loop.wait(c.AUTHENTICATION_REFRESH_SECONDS):
            loop.begin_pass()
            self._load_trust()

    # -- connections -----------------------------------------------------------------------

    def _accept_loop(self, listener: socket.socket, hopped: bool) -> None:
        while not self._stopping.is_set():
            try:
                conn, peer = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stopping.is_set():
                    return
                continue
            if not self._slots.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(
                target=self._serve, args=(conn, peer, hopped), name="console-conn", daemon=True
            ).start()

    def _serve(self, raw: socket.socket, peer: tuple[Any, ...], hopped: bool) -> None:
        # The handshake and the request head have one deadline in all; per-read timeouts alone
        # would let a client that sends a byte now and then keep its slot for ever.
        head_deadline = threading.Timer(c.CONSOLE_HEAD_DEADLINE, _cut, args=(raw,))
        head_deadline.daemon = True
        try:
            raw.settimeout(c.CONSOLE_IO_TIMEOUT)
            with self._lock:
                context, trust = self._context, self._trust
            if hopped:
                assert self._hop_server is not None
                context = self._hop_server
            head_deadline.start()
            try:
                conn = context.wrap_socket(raw, server_side=True)
            except (ssl.SSLError, OSError) as err:
                log.warning(
                    "console: TLS handshake with %s%s failed: %s",
                    peer[0],
                    " (hop port)" if hopped else "",
                    err,
                )
                return
            with conn:
                self._handle(conn, trust, peer, head_deadline, hopped=hopped)
        except Exception:
            log.exception("console: serving %s failed", peer[0])
        finally:
            head_deadline.cancel()
            raw.close()
            self._slots.release()

    def _handle(
        self,
        conn: ssl.SSLSocket,
        trust: FrontProxyTrust | None,
        peer: tuple[Any, ...],
        head_deadline: threading.Timer,
        *,
        hopped: bool = False,
    ) -> None:
        request = _read_request(conn)
        head_deadline.cancel()
        if request is None:
            return
        cert = conn.getpeercert()
        common_name = _common_name(cert) if cert else None
        peer_names = certificate_names(cert) if hopped else frozenset()
        route = match_route(request.path)
        shot = match_screenshot_route(request.path) if route is None else None
        stats_route = match_stats_route(request.path) if route is None and shot is None else None
        forward = (
            match_portforward_route(request.path)
            if route is None and stats_route is None and shot is None
            else None
        )

        def caller() -> Identity:
            return self._identify(request, trust, common_name, peer_names if hopped else None)

        identity: Identity | None = None
        hop: _HopNeededError | None = None
        try:
            try:
                if shot is not None:
                    identity = caller()
                    self._screenshot(conn, request, shot, identity)
                    return
                if isinstance(forward, Refusal):
                    raise _RefusedError(forward)
                if forward is not None:
                    identity = caller()
                    self._port_forward(conn, request, forward, identity)
                    return
                if isinstance(stats_route, Refusal):
                    raise _RefusedError(stats_route)
                if stats_route is not None:
                    identity = caller()
                    self._serve_stats(conn, request, stats_route, identity, hopped=hopped)
                    return
                if route is None:
                    if hopped:
                        # Hops carry requests for one machine; discovery is the front proxy's.
                        raise _RefusedError(Refusal(404, "NotFound", "not served on the hop port"))
                    self._discovery(conn, request, trust, common_name)
                    return
                identity = caller()
                if route.subresource == c.VNC_SUBRESOURCE:
                    self._vnc(conn, request, route, identity)
                    return
                self._console(conn, request, route, identity)
            except _HopNeededError as needed:
                if hopped:
                    raise _RefusedError(no_second_hop(needed.name, needed.host)) from needed
                hop = needed
            if hop is not None:
                assert identity is not None
                self._hop(conn, request, hop, identity)
        except _RefusedError as refused:
            # The aggregator asks every aggregated server for its OpenAPI documents, often: a
            # path this endpoint does not serve is not news.
            quiet = (
                refused.refusal.code == 404
                and route is None
                and stats_route is None
                and shot is None
                and forward is None
            )
            level = logging.DEBUG if quiet else logging.INFO
            log.log(
                level,
                "console: %s %s from %s%s refused: %d %s",
                request.method,
                request.path.split("?", 1)[0],
                peer[0],
                " (by hop)" if hopped else "",
                refused.refusal.code,
                refused.refusal.message,
            )
            _answer(conn, refused.refusal.code, status_body(refused.refusal))

    # -- the hop between daemons (console/hop.py, hop_relay.py) ----------------------------

    def _hop(
        self, conn: ssl.SSLSocket, request: _Request, hop: _HopNeededError, identity: Identity
    ) -> None:
        """Forward an authorized request to the daemon serving the machine's host, and relay
        the bytes both ways until either end closes."""
        settings = self._settings.hop
        if settings is None or self._hop_client is None:
            raise _RefusedError(
                Refusal(
                    503,
                    "ServiceUnavailable",
                    f"LibvirtMachine {hop.name} runs on host {hop.host}, which this daemon does "
                    "not serve (hops between daemons are off: --console-hop-port)",
                )
            )
        try:
            lease = self._kube.read_namespaced_lease(
                heartbeat_lease_name(hop.host),
                settings.lease_namespace,
                _request_timeout=c.CONSOLE_API_TIMEOUT,
            )
        except API_ERRORS as err:
            if failure_of(err) is not ApiFailure.NOT_FOUND:
                raise _RefusedError(
                    Refusal(
                        503,
                        "ServiceUnavailable",
                        f"cannot read host {hop.host}'s heartbeat Lease: {describe_failure(err)}",
                    )
                ) from err
            lease = None
        target = hop_target(hop.host, lease, dt.datetime.now(dt.UTC))
        if isinstance(target, Refusal):
            raise _RefusedError(target)
        try:
            raw = socket.create_connection(
                (target.address, target.port), timeout=c.HOP_CONNECT_TIMEOUT
            )
        except OSError as err:
            raise _RefusedError(_unreachable(target, err)) from err
        _keepalive(raw)
        try:
            upstream = self._hop_client.wrap_socket(raw, server_hostname=c.HOP_PEER_NAME)
        except (ssl.SSLError, OSError) as err:
            raw.close()
            raise _RefusedError(_unreachable(target, err)) from err
        relay = HopRelay(conn, upstream)
        with self._lock:
            self._bridges.add(relay)
        started = time.monotonic()
        try:
            upstream.settimeout(c.CONSOLE_IO_TIMEOUT)
            upstream.sendall(
                hop_request_head(
                    request.method, request.path, request.headers, identity, target.authority
                )
                + request.rest
            )
            log.info(
                "console: %s's %s %s hops to host %s's daemon at %s",
                identity.user,
                request.method,
                request.path.split("?", 1)[0],
                hop.host,
                target.authority,
            )
            why = relay.run()
            log.info(
                "console: %s's hop to host %s ended after %.0f s (%d bytes there, %d back): %s",
                identity.user,
                hop.host,
                time.monotonic() - started,
                relay.forwarded,
                relay.returned,
                why,
            )
        except OSError as err:
            raise _RefusedError(_unreachable(target, err)) from err
        finally:
            relay.close()
            with self._bridges_done:
                self._bridges.discard(relay)
                self._bridges_done.notify_all()

    def _identify(
        self,
        request: _Request,
        trust: FrontProxyTrust | None,
        common_name: str | None,
        hop_peer: frozenset[str] | None,
    ) -> Identity:
        """The user of a request for a machine: from the front proxy's headers, or on the hop
        port (`hop_peer`: the names of the verified client certificate) from the hop's."""
        found = (
            hop_identity(hop_peer, request.headers)
            if hop_peer is not None
            else self._caller(request, trust, common_name, need_user=True)
        )
        if isinstance(found, Refusal):
            raise _RefusedError(found)
        assert found is not None
        return found

    def _caller(
        self,
        request: _Request,
        trust: FrontProxyTrust | None,
        common_name: str | None,
        *,
        need_user: bool,
    ) -> Identity | None:
        found = authenticate(trust, common_name, request.headers, need_user=need_user)
        if isinstance(found, Refusal):
            raise _RefusedError(found)
        return found

    def _discovery(
        self,
        conn: ssl.SSLSocket,
        request: _Request,
        trust: FrontProxyTrust | None,
        common_name: str | None,
    ) -> None:
        self._caller(request, trust, common_name, need_user=False)
        body = discovery_document(request.path) if request.method == "GET" else None
        if body is None:
            raise _RefusedError(Refusal(404, "NotFound", "the server could not find the resource"))
        _answer(conn, 200, body)

    # -- kubectl vm top -------------------------------------------------------------------

    def _may_read(self, identity: Identity, verb: str, namespace: str, name: str | None) -> bool:
        body = read_review(identity, verb, namespace, name)
        try:
            review = self._kube.create_subject_access_review(
                body, _request_timeout=c.CONSOLE_API_TIMEOUT
            )
        except API_ERRORS as err:
            raise _RefusedError(
                Refusal(503, "ServiceUnavailable", f"cannot check access: {describe_failure(err)}")
            ) from err
        status = review.get("status") or {}
        return bool(status.get("allowed")) and not status.get("denied")

    def _serve_stats(
        self,
        conn: ssl.SSLSocket,
        request: _Request,
        route: StatsRoute,
        identity: Identity,
        *,
        hopped: bool,
    ) -> None:
        if request.method != "GET":
            raise _RefusedError(
                Refusal(405, "MethodNotAllowed", f"{c.STATS_RESOURCE} are read with GET")
            )
        served = frozenset(h for h, _ in self._hosts())
        sources = [s for s in self._stats_sources() if route.host is None or s.host == route.host]
        held = {
            source.host: [
                (m.namespace, m.name, m.uid)
                for m in source.machines()
                if (route.namespace is None or m.namespace == route.namespace)
                and (route.name is None or m.name == route.name)
            ]
            for source in sources
        }
        # A list also shows other daemons' hosts (console/stats_fanout.py); a hop never asks on.
        far: list[tuple[str, str | None]] = []
        if route.name is None and not hopped and self._fanout is not None:
            try:
                far = [m for m in self._fanout.machine_hosts(route) if m[1] not in served]
            except API_ERRORS as err:
                raise _RefusedError(
                    Refusal(
                        503,
                        "ServiceUnavailable",
                        f"cannot list the machines: {describe_failure(err)}",
                    )
                ) from err
        allowed = readable_namespaces(
            identity,
            route,
            [
                *(ns for machines in held.values() for ns, _n, _u in machines),
                *(ns for ns, _host in far),
            ],
            lambda verb, namespace, name: self._may_read(identity, verb, namespace, name),
        )
        if isinstance(allowed, Refusal):
            raise _RefusedError(allowed)
        # Only hosts with a machine the user may see are asked: a user who may see nothing
        # costs no libvirt call.
        wanted = [s for s in sources if any(allowed.get(ns) for ns, _n, _u in held[s.host])]
        samples = [
            HostSample(source.host, tuple(held[source.host]), _records(answer), taken_at)
            for source, answer, taken_at in (self._stats.take(wanted) if self._stats else ())
        ]
        code, body = stats_document(route, samples, allowed)
        if hopped and route.name is None and route.host is not None and route.host not in served:
            # Asked for a host this daemon no longer serves (its Lease moved meanwhile).
            body["partialHosts"] = sorted({*body["partialHosts"], route.host})
        asked = hosts_to_ask(far, served, allowed, route) if far else []
        if asked and self._fanout is not None:
            body = merge_lists(body, self._fanout.ask(asked, route, identity))
        if code == 404 and route.name is not None and route.namespace is not None:
            machine = self._read_machine(route.namespace, route.name)
            elsewhere = hop_host(machine, served)
            # Only a user the namespace's review allowed goes on; the target reviews again.
            if elsewhere is not None and route.host is None and allowed.get(route.namespace):
                raise _HopNeededError(route.name, elsewhere)
            raise _RefusedError(missing_machine(route, machine))
        _answer(conn, code, encode(body))

    def _read_machine(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._kube.get_namespaced_custom_object(  # type: ignore[no-any-return]
                c.GROUP,
                c.VERSION,
                namespace,
                c.MACHINE_PLURAL,
                name,
                _request_timeout=c.CONSOLE_API_TIMEOUT,
            )
        except API_ERRORS as err:
            if failure_of(err) is not ApiFailure.NOT_FOUND:
                raise _RefusedError(
                    Refusal(
                        503,
                        "ServiceUnavailable",
                        f"cannot read the machine: {describe_failure(err)}",
                    )
                ) from err
            return None

    # -- the console -----------------------------------------------------------------------

    def _authorize(self, identity: Identity, route: ConsoleRoute) -> None:
        body = subject_access_review(identity, route.namespace, route.name, route.subresource)
        try:
            review = self._kube.create_subject_access_review(
                body, _request_timeout=c.CONSOLE_API_TIMEOUT
            )
        except API_ERRORS as err:
            raise _RefusedError(
                Refusal(503, "ServiceUnavailable", f"cannot check access: {describe_failure(err)}")
            ) from err
        status = review.get("status") or {}
        if not status.get("allowed") or status.get("denied"):
            raise _RefusedError(
                forbidden(identity, route.namespace, route.subresource, status.get("reason") or "")
            )

    def _target(
        self, route: ConsoleRoute, *, any_power: bool = False
    ) -> tuple[ConsoleTarget, LibvirtHypervisor, dict[str, Any]]:
        machine: dict[str, Any] | None
        try:
            machine = self._kube.get_namespaced_custom_object(
                c.GROUP,
                c.VERSION,
                route.namespace,
                c.CONSOLE_RESOURCE,
                route.name,
                _request_timeout=c.CONSOLE_API_TIMEOUT,
            )
        except API_ERRORS as err:
            if failure_of(err) is not ApiFailure.NOT_FOUND:
                raise _RefusedError(
                    Refusal(
                        503,
                        "ServiceUnavailable",
                        f"cannot read the machine: {describe_failure(err)}",
                    )
                ) from err
            machine = None
        hosts = dict(self._hosts())
        elsewhere = hop_host(machine, frozenset(hosts))
        if elsewhere is not None:
            raise _HopNeededError(route.name, elsewhere)
        found = (logs_target if any_power else console_target)(route, machine, frozenset(hosts))
        if isinstance(found, Refusal):
            raise _RefusedError(found)
        assert machine is not None  # console_target refuses a machine that does not exist
        return found, hosts[found.host], machine

    def _audit(self, machine: dict[str, Any], reason: str, message: str) -> None:
        """An audit Event on the machine, posted off the session's thread: a slow API server
        must not delay a keystroke or the end of a session."""
        threading.Thread(
            target=self._events.record,
            args=(machine,),
            kwargs={"type_": "Normal", "reason": reason, "message": message},
            name="console-audit",
            daemon=True,
        ).start()

    def _console(
        self, conn: ssl.SSLSocket, request: _Request, route: ConsoleRoute, identity: Identity
    ) -> None:
        if request.method != "GET":
            raise _RefusedError(Refusal(405, "MethodNotAllowed", "the console is a GET upgrade"))
        options = console_options(request.path)
        if isinstance(options, Refusal):
            raise _RefusedError(options)
        self._authorize(identity, route)
        # A log is read whatever the machine's power state; a session needs it running.
        target, hypervisor, machine = self._target(
            route, any_power=options.logs and not options.follow
        )
        key = request.header("Sec-WebSocket-Key")
        if "websocket" not in request.tokens("Upgrade") or not key:
            raise _RefusedError(Refusal(400, "BadRequest", "the console is a WebSocket"))
        if c.CONSOLE_SUBPROTOCOL not in request.tokens("Sec-WebSocket-Protocol"):
            raise _RefusedError(
                Refusal(
                    400, "BadRequest", f"the console speaks subprotocol {c.CONSOLE_SUBPROTOCOL}"
                )
            )
        if options.logs and not options.follow:
            self._send_logs(conn, key, route, target, machine)
            return
        seat, displaced = self._take_seat(route, identity, options)
        try:
            bridge = _Bridge(conn, seat.role, self._sharing)
        except OSError:
            self._sessions.release(seat)
            raise
        with self._lock:
            self._bridges.add(bridge)
            if seat.role == WRITER:
                self._writer_bridges[seat] = bridge
        if not self._sessions.holds(seat):
            # Taken over between the seat and the line above: the one who took it did not find
            # this session to end, so it ends itself.
            bridge.closed("another writer took over the console (kubectl vm console --force)")
        shared: SharedConsole | None = None
        try:
            if displaced is not None:
                self._displace(displaced, identity.user, machine)
            if options.logs:
                # --logs --follow: what the host kept first, then the output as it comes.
                logged = self._logged_output(route, target, machine)
                if logged:
                    bridge.replay(logged)
            try:
                shared = self._hub.join(
                    (route.namespace, route.name),
                    target.domain_uuid,
                    hypervisor,
                    bridge,
                    log_file=self._log_file(route, target, machine),
                    replay=not options.logs,
                )
            except ProviderError as err:
                raise _RefusedError(
                    Refusal(503, "ServiceUnavailable", f"cannot open the console: {err}")
                ) from err
            self._bridge_session(
                conn,
                key,
                route=route,
                identity=identity,
                seat=seat,
                bridge=bridge,
                shared=shared,
                machine=machine,
            )
        finally:
            if shared is not None:
                self._hub.leave(shared, bridge)
            bridge.close()
            with self._bridges_done:
                self._bridges.discard(bridge)
                if self._writer_bridges.get(seat) is bridge:
                    del self._writer_bridges[seat]
                self._bridges_done.notify_all()
            self._sessions.release(seat)

    def _take_seat(
        self, route: ConsoleRoute, identity: Identity, options: ConsoleOptions
    ) -> tuple[Seat, Seat | None]:
        if options.role == VIEWER:
            return self._sessions.add_viewer(route.namespace, route.name, identity.user), None
        try:
            return self._sessions.take_writer(
                route.namespace, route.name, identity.user, force=options.force
            )
        except WriterBusyError as busy:
            raise _RefusedError(Refusal(409, "Conflict", str(busy))) from busy

    def _displace(self, displaced: Seat, user: str, machine: dict[str, Any]) -> None:
        """End the session of the writer whose seat `user` took over; it is told who."""
        with self._lock:
            old = self._writer_bridges.pop(displaced, None)
        if old is not None:
            old.closed(f"{user} took over the console (kubectl vm console --force)")
        log.info(
            "console: %s took over %s/%s from %s",
            user,
            displaced.machine[0],
            displaced.machine[1],
            displaced.user,
        )
        self._audit(machine, *taken_over(user, displaced.user))

    def _bridge_session(
        self,
        conn: ssl.SSLSocket,
        key: str,
        *,
        route: ConsoleRoute,
        identity: Identity,
        seat: Seat,
        bridge: _Bridge,
        shared: SharedConsole,
        machine: dict[str, Any],
    ) -> None:
        started = time.monotonic()
        log.info(
            "console: %s attached to %s/%s as %s",
            identity.user,
            route.namespace,
            route.name,
            seat.role,
        )
        conn.sendall(switching_protocols(key))
        self._audit(machine, *attached(identity.user, seat.role))
        why = bridge.run(shared)
        took = time.monotonic() - started
        log.info(
            "console: %s left %s/%s after %.0f s (%s)",
            identity.user,
            route.namespace,
            route.name,
            took,
            why,
        )
        self._audit(machine, *detached(identity.user, seat.role, took, why))

    # -- the console's log (kubectl vm console --logs) -------------------------------------

    def _log_file(
        self, route: ConsoleRoute, target: ConsoleTarget, machine: dict[str, Any]
    ) -> str | None:
        """The machine's console log: qemu's file on a local host, the file this daemon keeps
        for a remote host's machine (both with --console-log-dir only)."""
        if self._sharing.log_dir is None:
            return None
        recorded = ((machine.get("status") or {}).get("providerMetadata") or {}).get("domainName")
        domain = machine_domain_name(
            route.namespace, route.name, target.domain_uuid, recorded=recorded
        )
        return console_log_file(self._sharing.log_dir, domain)

    def _logged_output(
        self, route: ConsoleRoute, target: ConsoleTarget, machine: dict[str, Any]
    ) -> bytes:
        """The last `CONSOLE_LOGS_MAX_BYTES` of the machine's console log; without one (no
        --console-log-dir), what this daemon read of the console in sessions and keeps in
        memory."""
        path = self._log_file(route, target, machine)
        logged = (
            read_tail(path, c.CONSOLE_LOGS_MAX_BYTES, rotated=self._sharing.log_rotated)
            if path
            else None
        )
        if logged is not None:
            return logged
        return self._hub.output_of((route.namespace, route.name), target.domain_uuid)

    def _send_logs(
        self,
        conn: ssl.SSLSocket,
        key: str,
        route: ConsoleRoute,
        target: ConsoleTarget,
        machine: dict[str, Any],
    ) -> None:
        logged = self._logged_output(route, target, machine)
        conn.sendall(switching_protocols(key))
        with contextlib.suppress(OSError):
            for start in range(0, len(logged), c.CONSOLE_READ_CHUNK):
                conn.sendall(
                    encode_frame(Opcode.BINARY, logged[start : start + c.CONSOLE_READ_CHUNK])
                )
            conn.sendall(
                encode_frame(Opcode.CLOSE, close_payload(CloseCode.NORMAL, LOGS_END_REASON))
            )
        log.info(
            "console: the console log of %s/%s sent (%d bytes)",
            route.namespace,
            route.name,
            len(logged),
        )

    # -- VNC (docs/console.md, "VNC and screenshots") ------------------------------------------

    def _display_target(
        self, request: _Request, route: ConsoleRoute, identity: Identity
    ) -> tuple[ConsoleTarget, LibvirtHypervisor, dict[str, Any]]:
        """The console's checks, in its order, for `get libvirtmachines/vnc`; then the machine
        must have a VNC display."""
        if request.method != "GET":
            raise _RefusedError(Refusal(405, "MethodNotAllowed", "VNC is read with GET"))
        self._authorize(identity, route)
        target, hypervisor, machine = self._target(route)
        no_display = vnc_refusal(route.name, machine)
        if no_display is not None:
            raise _RefusedError(no_display)
        return target, hypervisor, machine

    def _screenshot(
        self, conn: ssl.SSLSocket, request: _Request, route: ConsoleRoute, identity: Identity
    ) -> None:
        target, hypervisor, _machine = self._display_target(request, route, identity)
        try:
            mime, image = hypervisor.screenshot(target.domain_uuid)
            png = screenshot_png(image)
        except (ProviderError, ImageError) as err:
            raise _RefusedError(
                Refusal(503, "ServiceUnavailable", f"cannot take a screenshot: {err}")
            ) from err
        log.info(
            "console: %s took a screenshot of %s/%s (libvirt gave %s, %d bytes)",
            identity.user,
            route.namespace,
            route.name,
            mime or "no type",
            len(image),
        )
        answer_png(conn, png)

    def _vnc(
        self, conn: ssl.SSLSocket, request: _Request, route: ConsoleRoute, identity: Identity
    ) -> None:
        target, hypervisor, machine = self._display_target(request, route, identity)
        key = request.header("Sec-WebSocket-Key")
        if "websocket" not in request.tokens("Upgrade") or not key:
            raise _RefusedError(Refusal(400, "BadRequest", "VNC is a WebSocket"))
        protocol = choose_subprotocol(request.tokens("Sec-WebSocket-Protocol"))
        if protocol is None:
            raise _RefusedError(
                Refusal(
                    400,
                    "BadRequest",
                    f"VNC speaks subprotocol {' or '.join(c.VNC_SUBPROTOCOLS)}",
                )
            )
        try:
            display = hypervisor.open_graphics(target.domain_uuid)
        except ProviderError as err:
            raise _RefusedError(
                Refusal(503, "ServiceUnavailable", f"cannot open the VNC display: {err}")
            ) from err
        bridge = VncBridge(conn, display)
        with self._lock:
            self._bridges.add(bridge)
        started = time.monotonic()
        try:
            conn.sendall(switching_protocols(key, protocol))
            log.info("console: %s opened the display of %s/%s", identity.user, route.namespace,
                     route.name)  # fmt: skip
            self._audit(machine, *vnc_attached(identity.user))
            why = bridge.run()
            took = time.monotonic() - started
            log.info("console: %s left the display of %s/%s after %.0f s (%s)", identity.user,
                     route.namespace, route.name, took, why)  # fmt: skip
            self._audit(machine, *vnc_detached(identity.user, took, why))
        finally:
            bridge.close()
            with self._bridges_done:
                self._bridges.discard(bridge)
                self._bridges_done.notify_all()

    # -- port-forward (console/portforward.py, port_forward.py) -----------------------------

    def _port_forward(
        self, conn: ssl.SSLSocket, request: _Request, route: PortForwardRoute, identity: Identity
    ) -> None:
        if request.method != "GET":
            raise _RefusedError(Refusal(405, "MethodNotAllowed", "port-forward is a GET upgrade"))
        self._authorize(identity, route.console_route)
        machine = self._read_machine(route.namespace, route.name)
        served = frozenset(h for h, _ in self._hosts())
        elsewhere = hop_host(machine, served)
        if elsewhere is not None:
            raise _HopNeededError(route.name, elsewhere)
        target = portforward_target(route, machine, served)
        if isinstance(target, Refusal):
            raise _RefusedError(target)
        key = request.header("Sec-WebSocket-Key")
        if "websocket" not in request.tokens("Upgrade") or not key:
            raise _RefusedError(Refusal(400, "BadRequest", "port-forward is a WebSocket"))
        protocol = portforward_subprotocol(request.tokens("Sec-WebSocket-Protocol"))
        if protocol is None:
            spoken = " or ".join(c.PORTFORWARD_SUBPROTOCOLS)
            raise _RefusedError(Refusal(400, "BadRequest", f"port-forward speaks {spoken}"))
        where = f"{route.namespace}/{route.name} port {route.port}"
        try:
            guest = self._dialer.dial(target.address, target.port, c.PORTFORWARD_DIAL_TIMEOUT)
        except OSError as err:
            # The guest's own answer (refused, unreachable, silent): the daemon is the gateway.
            raise _RefusedError(
                Refusal(
                    502,
                    "BadGateway",
                    f"cannot connect to LibvirtMachine {route.name}'s {target.address}:"
                    f"{target.port}: {err.strerror or err}",
                )
            ) from err
        bridge = PortBridge(conn, guest, half_close=protocol == c.PORTFORWARD_SUBPROTOCOL)
        with self._lock:
            self._bridges.add(bridge)
        started = time.monotonic()
        try:
            log.info(
                "console: %s forwards to %s (%s:%d)",
                identity.user,
                where,
                target.address,
                target.port,
            )
            conn.sendall(switching_protocols(key, protocol))
            why = bridge.run()
            log.info(
                "console: %s's stream to %s ended: %s",
                identity.user,
                where,
                bridge.tally.describe(time.monotonic() - started, why),
            )
        finally:
            bridge.close()
            with self._bridges_done:
                self._bridges.discard(bridge)
                self._bridges_done.notify_all()


class _Bridge:
    """One console session's loop on its connection's thread: the socket and a wake-up pipe in
    one `select`, output queued by libvirt's event thread (the machine's shared console fans it
    out), pings when idle. A viewer's keystrokes are dropped; a viewer too far behind is cut off
    (`console/sharing.py` decides)."""

    def __init__(self, conn: ssl.SSLSocket, role: str, sharing: SharingSettings) -> None:
        self._conn = conn
        self._role = role
        self._sharing = sharing
        self._output: queue.SimpleQueue[bytes | str] = queue.SimpleQueue()
        self._queued = 0
        self._queued_bytes = 0
        self._cut = False
        self._count_lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self._paused = False

    def replay(self, data: bytes) -> None:
        with self._count_lock:
            self._queued += 1
            self._queued_bytes += len(data)
        self._output.put(data)
        self._wake()

    # Called on libvirt's event thread.
    def output(self, data: bytes) -> bool:
        with self._count_lock:
            if self._cut:
                return True
            decision = on_output(
                self._role,
                self._queued + 1,
                self._queued_bytes + len(data),
                max_chunks=c.CONSOLE_QUEUE_CHUNKS,
                viewer_backlog=self._sharing.viewer_backlog_bytes,
            )
            if decision is OutputDecision.CUT:
                self._cut = True
            else:
                self._queued += 1
                self._queued_bytes += len(data)
                if decision is OutputDecision.PAUSE:
                    self._paused = True
        if decision is OutputDecision.CUT:
            self.closed(
                f"this viewer fell more than {self._sharing.viewer_backlog_bytes} bytes behind "
                "the guest's output"
            )
            return True
        self._output.put(data)
        self._wake()
        return decision is OutputDecision.QUEUE

    def closed(self, reason: str) -> None:
        self._output.put(reason)
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"\0")

    def run(self, stream: SharedConsole) -> str:
        """Bridge until the session ends; why it ended."""
        try:
            return self._loop(stream)
        except OSError as err:
            # A write to a client that went away (a ping, a pong, the guest's output).
            return f"the client's connection failed: {err}"

    def close(self) -> None:
        for sock in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                sock.close()

    def _send(self, opcode: Opcode, payload: bytes) -> None:
        self._conn.sendall(encode_frame(opcode, payload))

    def _loop(self, stream: SharedConsole) -> str:
        reader = FrameReader(max_payload=c.CONSOLE_MAX_FRAME, unmask=fast_mask)
        heard = time.monotonic()
        pinged = heard
        typed = heard
        while True:
            now = time.monotonic()
            if now - heard > c.CONSOLE_PING_SECONDS * c.CONSOLE_SILENT_PINGS:
                return "the client stopped answering"
            idle = self._idle(now - typed)
            if idle is not None:
                return idle
            if ping_due(
                now - pinged,
                now - typed,
                idle_every=c.CONSOLE_PING_SECONDS,
                busy_every=c.CONSOLE_BUSY_PING_SECONDS,
            ):
                self._send(Opcode.PING, b"vmapi")
                pinged = now
            wait = min(
                max(0.0, pinged + c.CONSOLE_PING_SECONDS - now), self._idle_left(now - typed)
            )
            if self._conn.pending():
                ready: list[Any] = [self._conn]
            else:
                ready, _, _ = select.select([self._conn, self._wake_r], [], [], wait)
            if self._wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    self._wake_r.recv(4096)
                why = self._drain(stream)
                if why is not None:
                    with contextlib.suppress(OSError):
                        self._send(Opcode.CLOSE, close_payload(CloseCode.GOING_AWAY, why))
                    return why
            if self._conn in ready:
                try:
                    data = self._conn.recv(c.CONSOLE_READ_CHUNK)
                except ssl.SSLWantReadError:
                    continue
                except OSError as err:
                    return f"the client's connection failed: {err}"
                if not data:
                    return "the client disconnected"
                heard = time.monotonic()
                try:
                    frames = reader.feed(data)
                except ProtocolError as err:
                    with contextlib.suppress(OSError):
                        self._send(Opcode.CLOSE, close_payload(err.code, str(err)))
                    return f"protocol error: {err}"
                for frame in frames:
                    if frame.opcode in (Opcode.BINARY, Opcode.TEXT, Opcode.CONTINUATION):
                        typed = time.monotonic()
                        failed = self._keystrokes(stream, frame.payload)
                        if failed is not None:
                            return failed
                    elif frame.opcode == Opcode.PING:
                        self._send(Opcode.PONG, frame.payload)
                    elif frame.opcode == Opcode.CLOSE:
                        with contextlib.suppress(OSError):
                            self._send(Opcode.CLOSE, close_payload(CloseCode.NORMAL))
                        return "the client closed the session"

    def _keystrokes(self, stream: SharedConsole, payload: bytes) -> str | None:
        """Send a client's input to the guest (a viewer's goes nowhere); why the session ends
        instead: it failed, or the client went away meanwhile."""
        if self._role == VIEWER:
            return None
        for piece in input_pieces(payload, c.CONSOLE_INPUT_CHUNK):
            # A paste reaches the guest at its serial line's pace, so the client may be gone
            # long before its input is: what it sent is still unread on this socket, and
            # pasting it all first would hold the seat for as long.
            if _hung_up(self._conn):
                return CLIENT_GONE_REASON
            try:
                stream.send(piece, timeout=c.CONSOLE_IO_TIMEOUT)
            except ProviderError as err:
                with contextlib.suppress(OSError):
                    self._send(Opcode.CLOSE, close_payload(CloseCode.INTERNAL_ERROR, str(err)))
                return str(err)
        return None

    def _idle_left(self, seconds: float) -> float:
        """Seconds until the session's idle timeout (a large number without one)."""
        limit = (
            self._sharing.viewer_idle_seconds
            if self._role == VIEWER
            else self._sharing.writer_idle_seconds
        )
        return max(0.0, limit - seconds) if limit > 0 else c.CONSOLE_PING_SECONDS

    def _idle(self, seconds: float) -> str | None:
        """Past the idle timeout of the session's role: the client is told, and why."""
        if not idle_expired(
            self._role,
            seconds,
            writer_limit=self._sharing.writer_idle_seconds,
            viewer_limit=self._sharing.viewer_idle_seconds,
        ):
            return None
        why = f"idle for {seconds:.0f} s (the daemon's idle timeout)"
        with contextlib.suppress(OSError):
            self._send(Opcode.CLOSE, close_payload(CloseCode.GOING_AWAY, why))
        return why

    def _drain(self, stream: SharedConsole) -> str | None:
        """Send what the guest wrote; the reason when its console closed."""
        while True:
            try:
                item = self._output.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, str):
                return item
            with self._count_lock:
                self._queued -= 1
                self._queued_bytes -= len(item)
            self._send(Opcode.BINARY, item)
        with self._count_lock:
            resume = self._paused and self._queued < c.CONSOLE_QUEUE_CHUNKS // 2
            if resume:
                self._paused = False
        if resume:
            stream.resume_reading()
        return None


def _records(answer: list[DomainStats] | None) -> tuple[DomainStats, ...] | None:
    return tuple(answer) if answer is not None else None


def _hung_up(sock: socket.socket) -> bool:
    """The peer closed the connection (or it failed), whether or not bytes it sent before are
    still unread: Linux reports the peer's FIN as POLLRDHUP at once."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLRDHUP)
    return any(
        events & (select.POLLRDHUP | select.POLLHUP | select.POLLERR)
        for _, events in poller.poll(0)
    )


def _cut(sock: socket.socket) -> None:
    """End a connection from another thread: a read blocked on it returns at once."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _keepalive(sock: socket.socket) -> None:
    """TCP keepalives on a hop's connection: a target that vanished (its node gone, the network
    cut) sends nothing, not even a reset, so without them the relay would wait until its client
    gives up; with them the kernel ends it in about a minute."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


def _unreachable(target: HopTarget, err: Exception) -> Refusal:
    return Refusal(
        503,
        "ServiceUnavailable",
        f"cannot reach the daemon serving host {target.host} at {target.authority}: {err}",
    )


def _common_name(cert: dict[str, Any]) -> str | None:
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def _read_request(conn: ssl.SSLSocket) -> _Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > c.CONSOLE_MAX_HEAD:
            _answer(conn, 431, status_body(Refusal(431, "BadRequest", "request head too large")))
            return None
        try:
            chunk = conn.recv(4096)
        except (OSError, ssl.SSLError):
            return None
        if not chunk:
            return None
        data += chunk
    raw_head, rest = data.split(b"\r\n\r\n", 1)
    head = raw_head.decode("latin-1")
    lines = head.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        _answer(conn, 400, status_body(Refusal(400, "BadRequest", "malformed request line")))
        return None
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers.append((name.strip(), value.strip()))
    return _Request(parts[0], parts[1], headers, rest)


_PHRASES = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


def _answer(conn: ssl.SSLSocket, code: int, body: bytes) -> None:
    head = (
        f"HTTP/1.1 {code} {_PHRASES.get(code, 'Error')}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        conn.sendall(head.encode("ascii") + body)


def settings_from_files(
    address: str, port: int, cert: str, key: str, *, hop: HopSettings | None = None
) -> ConsoleSettings:
    """Settings whose certificate files exist (a clear error at start, not at the first TLS)."""
    for path in (cert, key):
        if not Path(path).is_file():
            raise FileNotFoundError(f"console serving certificate file {path} does not exist")
    if hop is not None and not Path(hop.ca_file).is_file():
        raise FileNotFoundError(f"console hop CA file {hop.ca_file} does not exist")
    return ConsoleSettings(address=address, port=port, cert_file=cert, key_file=key, hop=hop)
