"""Opening a remote host's connection with a deadline, without leaving threads or sockets behind.

libvirt-python's `open` blocks, with no timeout of its own: none of the remote driver's URI
parameters bounds the connect, and once TCP is up libvirt waits for the TLS handshake's answer
(and then for the answer to its first RPC) in `poll()` without a timeout. libvirt's keepalive
probes start only once the connection is open. So a host that accepts TCP and never answers
(a hung libvirtd, a middlebox that black-holes the flow) holds the opening thread and its
socket for as long as the peer keeps the connection, which may be for ever. A deadline on the
caller's wait alone stops the waiting, not the thread: each attempt used to leak one thread and
one socket.

Here:

- At most one attempt is in flight per endpoint (`AttemptGate`, process-wide, keyed by the
  host and port the transport connects to): a new one while one is still running is refused at
  once as `Unreachable` ("busy"), never started beside it.
- The opening runs on a thread of its own, the caller waits for it up to the deadline, then
  abandons it: the attempt's TCP connection to the host is shut down (`shutdown(2)` on the
  socket; libvirt owns the descriptor, and closes it itself when its call fails), which wakes
  libvirt's `poll()` and makes `open` fail at once. A connection that an abandoned attempt
  still manages to open is closed by that thread.
- Which socket is the attempt's: one of this process's TCP sockets that did not exist when the
  attempt started and whose peer is the host's address (resolved by the attempt's thread) and
  port. Only the attempt can own such a socket, since no other attempt to that endpoint runs
  meanwhile. Read from /proc/self/fd (Linux).

What bounds an abandoned attempt's thread, precisely: it lives until libvirt's `open` returns.
While it lives, its socket is shut down at the deadline and then every `SWEEP_INTERVAL` by one
sweeper thread (which exists only while abandoned attempts do), so once its TCP connection is
established it ends within about `SWEEP_INTERVAL` after the deadline. Before that it can only
be resolving the host's name (bounded by the resolver's timeout and attempts) or in `connect()`
(bounded by the kernel's SYN retries, about 130 s with Linux's default `tcp_syn_retries` of 6).
Not bounded by the daemon: a qemu+ssh attempt, whose socket is a pipe to the OpenSSH client
rather than a connection to the host (ssh's own `ConnectTimeout` and `ServerAlive*` options end
it when the network or sshd goes silent, but not when sshd answers and libvirtd behind it does
not), and a TCP attempt to a name whose addresses changed between libvirt's lookup and the
attempt thread's. The gate keeps either to one thread per host, and refuses new attempts until
it ends.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

from generic.background import BackgroundLoop
from libvirt_provider import constants as c
from libvirt_provider.driver.endpoint import ConnectionProblemError

__all__ = [
    "AttemptGate",
    "BusyError",
    "attempt_key",
    "in_flight",
    "open_with_deadline",
    "tcp_peer",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

# Seconds between two shutdowns of an abandoned attempt's socket, while its thread lives.
SWEEP_INTERVAL = 1.0

# The port each TCP transport connects to when the URI names none (libvirt's defaults).
_DEFAULT_PORTS = {"qemu+tls": 16514, "qemu+libssh": 22, "qemu+libssh2": 22, "qemu+tcp": 16509}


def tcp_peer(uri: str) -> tuple[str, int] | None:
    """The host and port whose TCP connection libvirt opens in this process for `uri`; None for
    a transport that opens none here (qemu+ssh talks to an OpenSSH child through a pipe; local
    URIs use a Unix socket)."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    return parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def attempt_key(uri: str) -> tuple[str, int | None]:
    """What at most one attempt may be in flight for: the transport's host and port (any
    transport; two URIs that reach the same endpoint share it)."""
    peer = tcp_peer(uri)
    if peer is not None:
        return peer
    parts = urlsplit(uri)
    try:
        port = parts.port
    except ValueError:
        port = None
    return (parts.hostname or uri).lower(), port


class BusyError(Exception):
    """An attempt for this key is still in flight, started `age` seconds ago."""

    def __init__(self, age: float) -> None:
        super().__init__(f"an attempt started {age:.0f} s ago is still in flight")
        self.age = age


class AttemptGate:
    """At most one attempt in flight per key: `begin` (or `BusyError`), then `end`, whatever
    the attempt's outcome. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._started: dict[Hashable, float] = {}

    def begin(self, key: Hashable) -> None:
        with self._lock:
            started = self._started.get(key)
            if started is not None:
                raise BusyError(self._clock() - started)
            self._started[key] = self._clock()

    def end(self, key: Hashable) -> None:
        with self._lock:
            self._started.pop(key, None)

    def busy(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._started


@dataclass
class _Attempt(Generic[T]):
    key: tuple[str, int | None]
    peer: tuple[str, int] | None
    # Inodes of the sockets this process had when the attempt started: none of them is its own.
    sockets_before: frozenset[int]
    close: Callable[[T], None]
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)
    # The host's addresses, once the attempt's thread resolved them.
    addresses: frozenset[str] = frozenset()
    abandoned: bool = False
    # Set, under `lock`, before the gate lets the endpoint's next attempt start: from then on a
    # TCP connection to the peer that is not in `sockets_before` may be the next attempt's.
    finished: bool = False
    result: T | None = None
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def run(self, opener: Callable[[], T]) -> None:
        try:
            if self.peer is not None:
                self.addresses = _addresses(*self.peer)
            try:
                opened: T | None = opener()
                error: BaseException | None = None
            except Exception as err:
                opened, error = None, err
            with self.lock:
                if not self.abandoned:
                    self.result, self.error = opened, error
                    self.done.set()
                    return
            # Abandoned: nobody takes what was opened late.
            if opened is not None:
                with contextlib.suppress(Exception):
                    self.close(opened)
        finally:
            with self.lock:
                self.finished = True
            _GATE.end(self.key)

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def cut(self) -> int:
        """Shut down the attempt's TCP connection to the host; how many sockets were. Never once
        the attempt has finished: the sweeper may still hold it when the next attempt to the
        endpoint has opened its own connection, which this must not touch."""
        with self.lock:
            if self.finished or self.peer is None or not self.addresses:
                return 0
            return _shut_down_sockets(self.addresses, self.peer[1], exclude=self.sockets_before)


_GATE = AttemptGate()


def in_flight(uri: str) -> bool:
    """Whether an attempt for `uri`'s endpoint is still running (abandoned or not)."""
    return _GATE.busy(attempt_key(uri))


def open_with_deadline(
    uri: str, timeout: float, *, opener: Callable[[str], T], close: Callable[[T], None]
) -> T:
    """`opener(uri)` on a thread of its own, given up after `timeout` seconds (its connection
    shut down, so the thread ends; see the module's notes); `ConnectionProblemError(Unreachable)`
    when it timed out or another attempt for the endpoint is still in flight. An error of the
    opener is raised as it is."""
    key = attempt_key(uri)
    try:
        _GATE.begin(key)
    except BusyError as busy:
        _SWEEPER.sweep_now()
        raise ConnectionProblemError(
            c.REASON_UNREACHABLE,
            f"the previous connection attempt, started {busy.age:.0f} s ago, has not ended "
            "(no answer); no new one is started until it does",
        ) from None
    peer = tcp_peer(uri)
    attempt: _Attempt[T] = _Attempt(
        key=key, peer=peer, sockets_before=_socket_inodes() if peer else frozenset(), close=close
    )
    thread = threading.Thread(
        target=attempt.run, args=(lambda: opener(uri),), name="libvirt-connect", daemon=True
    )
    attempt.thread = thread
    try:
        thread.start()
    except BaseException:
        _GATE.end(key)
        raise
    attempt.done.wait(timeout)
    with attempt.lock:
        if not attempt.done.is_set():
            attempt.abandoned = True
    if attempt.abandoned:
        attempt.cut()
        _SWEEPER.watch(attempt)
        raise ConnectionProblemError(
            c.REASON_UNREACHABLE, f"no answer within {timeout:g} s (connection timed out)"
        )
    if attempt.error is not None:
        raise attempt.error
    assert attempt.result is not None
    return attempt.result


class _Sweeper:
    """Shuts down abandoned attempts' sockets every `SWEEP_INTERVAL` while their threads live;
    its own thread exists only while there are some."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._attempts: list[_Attempt[Any]] = []
        self._loop: BackgroundLoop | None = None

    def watch(self, attempt: _Attempt[Any]) -> None:
        with self._lock:
            self._attempts.append(attempt)
            if self._loop is None:
                self._loop = BackgroundLoop("libvirt-connect-sweeper", self._run)
                self._loop.start()

    def sweep_now(self) -> None:
        with self._lock:
            if self._loop is not None:
                self._loop.wake()

    def _run(self, loop: BackgroundLoop) -> None:
        while True:
            with self._lock:
                self._attempts = [a for a in self._attempts if a.alive()]
                if not self._attempts:
                    self._loop = None
                    return
                attempts = list(self._attempts)
            for attempt in attempts:
                attempt.cut()
            loop.wait(SWEEP_INTERVAL)


_SWEEPER = _Sweeper()


def _addresses(host: str, port: int) -> frozenset[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return frozenset()  # libvirt will not connect either
    return frozenset(str(info[4][0]) for info in infos)


def _socket_inodes() -> frozenset[int]:
    return frozenset(_sockets_by_fd().values())


def _sockets_by_fd() -> dict[int, int]:
    """This process's sockets: descriptor -> socket inode (empty where /proc is not Linux's)."""
    found: dict[int, int] = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # closed meanwhile, or the listing's own descriptor
        if target.startswith("socket:[") and target.endswith("]"):
            found[int(name)] = int(target[len("socket:[") : -1])
    return found


def _shut_down_sockets(addresses: frozenset[str], port: int, *, exclude: frozenset[int]) -> int:
    """`shutdown(SHUT_RDWR)` every TCP socket of this process, not among `exclude` (inodes),
    connected to one of `addresses` on `port`. The descriptors stay their owner's: each is
    examined through a duplicate, which is closed again."""
    cut = 0
    for fd, inode in _sockets_by_fd().items():
        if inode in exclude:
            continue
        try:
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        with sock:
            try:
                if os.fstat(sock.fileno()).st_ino != inode:
                    continue  # the descriptor was reused since it was listed
                if sock.family not in (socket.AF_INET, socket.AF_INET6):
                    continue
                if sock.type != socket.SOCK_STREAM:
                    continue
                peer = sock.getpeername()
            except OSError:
                continue  # not connected (yet)
            if peer[1] != port or str(peer[0]) not in addresses:
                continue
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
                cut += 1
    if cut:
        log.debug("shut down %d abandoned connection(s) to port %d", cut, port)
    return cut
