"""The libvirt connection the adapter's calls share, and libvirt's event loop thread.

One shared connection per host, opened lazily and reopened after loss. libvirt-python blocks,
so callers run it from worker threads; a `CallLimiter` (`limits.py`) bounds the calls toward
libvirtd (a token bucket and a cap on calls in flight, each waited for with a deadline).
libvirt's default event loop runs in a thread of its own: it carries keepalive probes (so a dead
libvirtd is noticed within seconds) and lifecycle events (so the controller reconciles promptly
instead of polling). A driver without keepalive (libvirt's in-process test driver, which cannot
lose its daemon) is used without it.

A remote host's URI comes from a `UriSource`, which writes the credentials and may refuse before
any connection is tried (no Secret, a bad URI). Opening is bounded by a deadline, with at most one
attempt in flight per host and an abandoned attempt's connection shut down so that its thread
ends (`connect_attempts.py`: a host that accepts TCP and never answers would otherwise keep a
thread and a socket per attempt for good); a failure is classified into the host's `Connected`
reason, and attempts back off (doubling up to `MAX_BACKOFF`) while the host stays unreachable;
calls in the meantime fail at once with `HostUnreachableError`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import libvirt

from libvirt_provider import constants as c
from libvirt_provider.driver.connect_attempts import open_with_deadline
from libvirt_provider.driver.endpoint import (
    ConnectionProblemError,
    classify_failure,
    summarize_failure,
)
from libvirt_provider.driver.libvirt_errors import is_unsupported_call, translated
from libvirt_provider.driver.limits import (
    AgentGate,
    AgentGateStats,
    CallLimiter,
    LimiterStats,
    Limits,
)
from libvirt_provider.driver.types import LifecycleListener
from libvirt_provider.errors import HostUnreachableError, RetryableError

__all__ = ["ConnectionState", "LibvirtConnection", "UriSource", "stop_event_loop"]

# Returns the URI to open (writing credentials first), or raises `ConnectionProblemError`.
UriSource = Callable[[], str]

FIRST_BACKOFF = 1.0
MAX_BACKOFF = 30.0


@dataclass(frozen=True)
class ConnectionState:
    """The last connection attempt's outcome, for the host's `Connected` condition."""

    connected: bool
    reason: str
    message: str


log = logging.getLogger(__name__)
T = TypeVar("T")


class _EventLoop:
    """libvirt's default event loop on a thread of its own, started once per process and stopped
    before the interpreter exits.

    Stopping matters: the loop thread runs inside libvirt's C code and calls back into Python
    (lifecycle and close callbacks, freeing a callback's data after a connection closed). If the
    interpreter is already finalizing when such a callback wants the GIL, CPython ends the thread
    with pthread_exit, whose forced unwinding through libvirt's C frames aborts the process: the
    SIGABRT seen after an otherwise clean stop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def ensure(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            libvirt.virEventRegisterDefaultImpl()
            # libvirt prints every error to stderr by default, including the "not found" answers
            # that lookups expect; errors still raise, and are logged where they matter.
            libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
            self._thread = threading.Thread(target=self._run, name="libvirt-events", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            libvirt.virEventRunDefaultImpl()

    def stop(self, timeout: float = 5.0) -> bool:
        """End the loop thread (a no-op timer wakes it from its poll); True once it is gone."""
        with self._lock:
            thread = self._thread
        if thread is None:
            return True
        self._stopping.set()
        timer = libvirt.virEventAddTimeout(0, lambda _timer, _opaque: None, None)
        thread.join(timeout)
        if timer >= 0 and not thread.is_alive():
            libvirt.virEventRemoveTimeout(timer)
        return not thread.is_alive()


_event_loop = _EventLoop()


def stop_event_loop(timeout: float = 5.0) -> bool:
    """Stop libvirt's event loop thread; call once every connection is closed, before exit."""
    return _event_loop.stop(timeout)


def _close_quietly(conn: libvirt.virConnect) -> None:
    with contextlib.suppress(libvirt.libvirtError):
        conn.close()


class LibvirtConnection:
    """One libvirt connection URI, the calls made over it, and what listens to it."""

    def __init__(
        self,
        uri: str | UriSource,
        *,
        host: str = "",
        limits: Limits | None = None,
        keepalive_interval: int = 5,
        keepalive_count: int = 3,
        connect_timeout: float = c.CONNECT_TIMEOUT_SECONDS,
    ) -> None:
        # A remote host's URI carries credential paths: logs and errors name the host instead.
        self._remote = callable(uri)
        self._uri_source: UriSource = uri if callable(uri) else (lambda: uri)
        self._uri = host if callable(uri) else uri
        self._host = host or (uri if isinstance(uri, str) else "remote host")
        self._connect_timeout = connect_timeout
        self._state = ConnectionState(False, c.REASON_UNREACHABLE, "not connected yet")
        self._failures = 0
        self._retry_at = 0.0
        self._keepalive = (keepalive_interval, keepalive_count)
        # Set once this URI's driver said it has no keepalive, so that is logged only once.
        self._keepalive_unsupported = False
        self._conn: libvirt.virConnect | None = None
        self._lifecycle_callback: int | None = None
        self._connected_before = False
        self._conn_lock = threading.Lock()
        self._limiter = CallLimiter(limits)
        # Guest-agent calls have a budget of their own (limits.AgentGate says why).
        self._agents = AgentGate()
        self._pool_locks: dict[str, threading.Lock] = {}
        self._local_dirs: dict[str, Path | None] = {}
        self._listeners: list[LifecycleListener] = []
        self._reconnect_listeners: list[Callable[[], None]] = []

    # -- connection --------------------------------------------------------------------------

    def _connection(self) -> libvirt.virConnect:
        with self._conn_lock:
            conn = self._conn
            if conn is not None:
                try:
                    if conn.isAlive():
                        return conn
                except libvirt.libvirtError:
                    pass
                self._drop_locked(conn)
            _event_loop.ensure()
            conn = self._open_locked()
            try:
                self._set_keepalive(conn)
                conn.registerCloseCallback(self._on_close, None)
                self._lifecycle_callback = conn.domainEventRegisterAny(
                    None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._on_lifecycle, None
                )
                # A guest agent connecting or leaving changes the guest facts and agent addresses
                # the status reports; its callback has the lifecycle one's shape.
                conn.domainEventRegisterAny(
                    None, libvirt.VIR_DOMAIN_EVENT_ID_AGENT_LIFECYCLE, self._on_lifecycle, None
                )
            except libvirt.libvirtError as err:
                conn.close()
                raise RetryableError(f"cannot set up the libvirt connection: {err}") from err
            reconnected = self._connected_before
            self._connected_before = True
            self._conn = conn
            self._failures = 0
            self._state = ConnectionState(True, c.REASON_CONNECTED, "connected")
        if reconnected:
            log.info("reconnected to libvirt at %s", self._uri)
            for callback in list(self._reconnect_listeners):
                callback()
        return conn

    def _open_locked(self) -> libvirt.virConnect:
        if not self._remote:
            try:
                return libvirt.open(self._uri)
            except libvirt.libvirtError as err:
                self._state = ConnectionState(False, c.REASON_UNREACHABLE, str(err))
                raise RetryableError(f"cannot connect to libvirt at {self._uri}: {err}") from err
        now = time.monotonic()
        if now < self._retry_at:
            state = self._state
            raise HostUnreachableError(self._host, state.reason, state.message)
        try:
            uri = self._uri_source()
            return open_with_deadline(
                uri, self._connect_timeout, opener=libvirt.open, close=_close_quietly
            )
        except ConnectionProblemError as problem:
            raise self._failed_locked(problem.reason, problem.message) from None
        except libvirt.libvirtError as err:
            message = err.get_error_message() or str(err)
            reason = classify_failure(message)
            raise self._failed_locked(reason, summarize_failure(message)) from err

    def _failed_locked(self, reason: str, message: str) -> HostUnreachableError:
        """Record a failed attempt (its reason, the next attempt's time); the error to raise."""
        self._failures += 1
        delay = min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** (self._failures - 1))
        self._retry_at = time.monotonic() + delay
        if self._state != ConnectionState(False, reason, message):
            log.warning("host %s: not connected (%s): %s", self._host, reason, message)
        self._state = ConnectionState(False, reason, message)
        return HostUnreachableError(self._host, reason, message)

    def connection_state(self) -> ConnectionState:
        """Whether the connection is up, and why not (the last attempt's reason)."""
        with self._conn_lock:
            conn = self._conn
            if conn is not None:
                with contextlib.suppress(libvirt.libvirtError):
                    if conn.isAlive():
                        return self._state
                return ConnectionState(False, c.REASON_UNREACHABLE, "the connection was lost")
            return self._state

    def reset(self) -> None:
        """Close the connection and forget the backoff: the credentials or the URI changed."""
        with self._conn_lock:
            if self._conn is not None:
                self._drop_locked(self._conn)
            self._failures = 0
            self._retry_at = 0.0

    def reconnect(self) -> ConnectionState:
        """`reset`, then connect at once with what changed, and say how it went: the host's
        status tells the new connection's state now, not the old one's until some call happens
        to connect."""
        self.reset()
        with contextlib.suppress(HostUnreachableError, RetryableError):
            self._connection()
        return self.connection_state()

    def configure_limits(self, limits: Limits) -> None:
        self._limiter.configure(limits)

    def limiter_stats(self, *, reset: bool = False) -> LimiterStats:
        return self._limiter.stats(reset=reset)

    def agent_stats(self) -> AgentGateStats:
        return self._agents.stats()

    def _set_keepalive(self, conn: libvirt.virConnect) -> None:
        """Keepalive probes where the driver has them; an in-process driver (`test:///`) has no
        daemon to lose and no keepalive, which is no reason to refuse the connection. It is not
        even asked: in one unit test run its refusal came back without libvirt's error
        (`virConnectSetKeepAlive() failed`, no code), which read as a failure and refused the
        connection."""
        try:
            if urlsplit(self._uri).scheme != "test":
                conn.setKeepAlive(*self._keepalive)
                return
        except libvirt.libvirtError as err:
            if not is_unsupported_call(err):
                raise
        if not self._keepalive_unsupported:
            self._keepalive_unsupported = True
            log.info("libvirt at %s has no keepalive; connected without it", self._uri)

    def _drop_locked(self, conn: libvirt.virConnect) -> None:
        self._conn = None
        # Callbacks are taken off before the close, so none runs (or is freed) afterwards.
        callback, self._lifecycle_callback = self._lifecycle_callback, None
        with contextlib.suppress(libvirt.libvirtError):
            if callback is not None:
                conn.domainEventDeregisterAny(callback)
        with contextlib.suppress(libvirt.libvirtError):
            conn.unregisterCloseCallback()
        with contextlib.suppress(libvirt.libvirtError):
            conn.close()

    def _on_close(self, conn: libvirt.virConnect, reason: int, opaque: object) -> None:
        log.warning("libvirt connection to %s closed (reason %d)", self._uri, reason)
        with self._conn_lock:
            if self._conn is conn:
                self._conn = None

    def _on_lifecycle(
        self, conn: libvirt.virConnect, dom: libvirt.virDomain, event: int, detail: int, _: object
    ) -> None:
        uuid = dom.UUIDString()
        for listener in list(self._listeners):
            try:
                listener(uuid)
            except Exception:  # a listener's bug must not kill libvirt's event thread
                log.exception("lifecycle listener failed for domain %s", uuid)

    def add_lifecycle_listener(self, listener: LifecycleListener) -> None:
        self._listeners.append(listener)

    def add_reconnect_listener(self, callback: Callable[[], None]) -> None:
        """Called after the connection was lost and opened again (events may have been missed)."""
        self._reconnect_listeners.append(callback)

    def close(self) -> None:
        with self._conn_lock:
            if self._conn is not None:
                self._drop_locked(self._conn)

    def _call(self, fn: Callable[[libvirt.virConnect], T]) -> T:
        with self._limiter.call(f"libvirtd of host {self._host}"), translated():
            return fn(self._connection())

    def _domain(self, conn: libvirt.virConnect, uuid: str) -> libvirt.virDomain:
        return conn.lookupByUUIDString(uuid)

    def _pool_lock(self, pool: str) -> threading.Lock:
        with self._conn_lock:
            return self._pool_locks.setdefault(pool, threading.Lock())
