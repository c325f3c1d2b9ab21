"""One libvirt console stream per machine, shared by all of the machine's sessions on this daemon:
the fan-out of the guest's output, its replay ring, and the host's console log read for
`kubectl vm console --logs` (docs/console.md, "Sharing").

`virDomainOpenConsole` gives a domain's console to one stream at a time (a second one, opened with
`VIR_DOMAIN_CONSOLE_FORCE`, cuts the first), so the writer and every viewer share the stream the
first of them opened; it is closed when the last one leaves. The decisions (queues, seats, the
ring) are `console/sharing.py`'s and `console/sessions.py`'s; this is the shell that holds the
stream, the locks and the files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from libvirt_provider import constants as c
from libvirt_provider.console.keeping import log_files, tail_ranges
from libvirt_provider.console.sharing import ReplayRing
from libvirt_provider.driver.libvirt_console import LibvirtConsoleStream
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor

__all__ = ["ConsoleHub", "SharedConsole", "SharingSettings", "Subscriber", "read_tail"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SharingSettings:
    """The daemon's flags for shared sessions (docs/operations.md)."""

    replay_bytes: int = c.CONSOLE_REPLAY_BYTES
    writer_idle_seconds: float = c.CONSOLE_WRITER_IDLE_SECONDS
    viewer_idle_seconds: float = c.CONSOLE_VIEWER_IDLE_SECONDS
    viewer_backlog_bytes: int = c.CONSOLE_VIEWER_BACKLOG_BYTES
    # The console-log folder (--console-log-dir): qemu's files on a local host; on a remote-mode
    # replica, the files its console keeper writes (`console_keeper.py`).
    log_dir: str | None = None
    # A kept log's size bound per file (--console-log-bytes; remote hosts' logs only).
    log_bytes: int = c.CONSOLE_LOG_BYTES
    # Rotated files read beside the current one: the keeper's (`<file>.1`) on a remote-mode
    # replica; none on a local host, whose rotation (virtlogd's, when used) names its own.
    log_rotated: int = 0


class Subscriber(Protocol):
    """A session of the machine (`console_server._Bridge`)."""

    def output(self, data: bytes) -> bool:
        """Queue guest output; False: pause reading from the guest until `resume`."""
        ...

    def replay(self, data: bytes) -> None:
        """Queue the replay, before any output."""
        ...

    def closed(self, reason: str) -> None:
        """The session must end, for `reason`."""
        ...


def read_tail(path: str, max_bytes: int, *, rotated: int = 0) -> bytes | None:
    """The last `max_bytes` of a console log, from its `rotated` older files (`<path>.1` ...,
    as the console keeper rotates them) too when the current one holds fewer; None when there is
    no log at all (no such file)."""
    files = log_files(path, rotated)
    sizes: list[int] = []
    for name in files:
        try:
            sizes.append(os.stat(name).st_size)
        except OSError:
            sizes.append(0)
    if not os.path.exists(path) and not any(sizes):
        return None
    parts: list[bytes] = []
    for index, offset, length in tail_ranges(sizes, max_bytes):
        try:
            with open(files[index], "rb") as f:
                f.seek(offset)
                parts.append(f.read(length))
        except OSError:
            # Rotated meanwhile: what is left is still the log's end.
            continue
    return b"".join(parts)[-max_bytes:] if max_bytes > 0 else b""


class SharedConsole:
    """One machine's console stream and the sessions it feeds."""

    def __init__(self, hub: ConsoleHub, key: tuple[str, str], uuid: str, ring: ReplayRing) -> None:
        self.key = key
        self.uuid = uuid
        self._hub = hub
        self._ring = ring
        self._lock = threading.Lock()
        self._subscribers: list[Subscriber] = []
        self._stream: LibvirtConsoleStream | None = None

    def open(self, hypervisor: LibvirtHypervisor) -> None:
        self._stream = hypervisor.open_console(self.uuid, self._output, self._closed)

    # Called on libvirt's event thread.
    def _output(self, data: bytes) -> bool:
        with self._lock:
            self._ring.append(data)
            subscribers = list(self._subscribers)
        room = True
        for subscriber in subscribers:
            room = subscriber.output(data) and room
        return room

    def _closed(self, reason: str) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            subscriber.closed(reason)
        self._hub.forget(self)

    def subscribe(self, subscriber: Subscriber, *, replay: bool) -> None:
        with self._lock:
            if replay:
                kept = self._ring.contents()
                if kept:
                    subscriber.replay(kept)
            self._subscribers.append(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> bool:
        """Drop a session; True when it was the last."""
        with self._lock:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(subscriber)
            last = not self._subscribers
        if not last:
            # A writer that left while the guest's console was paused for it must not leave it
            # paused for the viewers.
            self.resume_reading()
        return last

    def send(self, data: bytes, *, timeout: float) -> None:
        assert self._stream is not None
        self._stream.send(data, timeout=timeout)

    def resume_reading(self) -> None:
        if self._stream is not None:
            self._stream.resume_reading()

    def kept(self) -> bytes:
        with self._lock:
            return self._ring.contents()

    def ring(self) -> ReplayRing:
        return self._ring

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()


class ConsoleHub:
    """The open shared consoles of this daemon, and the last output of machines whose last
    session left (in memory, at most `CONSOLE_KEPT_REPLAYS` machines)."""

    def __init__(self, settings: SharingSettings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._open: dict[tuple[str, str], SharedConsole] = {}
        self._kept: OrderedDict[tuple[str, str, str], ReplayRing] = OrderedDict()

    def join(
        self,
        key: tuple[str, str],
        uuid: str,
        hypervisor: LibvirtHypervisor,
        subscriber: Subscriber,
        *,
        log_file: str | None,
        replay: bool,
    ) -> SharedConsole:
        """Add a session to the machine's shared console, opening it if none is open (a
        `ProviderError` when libvirt cannot)."""
        with self._lock:
            shared = self._open.get(key)
            if shared is not None and shared.uuid != uuid:
                # The machine was made again under the same name: its old console is gone.
                shared = None
            if shared is None:
                shared = SharedConsole(self, key, uuid, self._ring_for(key, uuid, log_file))
                shared.open(hypervisor)
                self._open[key] = shared
            shared.subscribe(subscriber, replay=replay)
            return shared

    def _ring_for(self, key: tuple[str, str], uuid: str, log_file: str | None) -> ReplayRing:
        size = self._settings.replay_bytes
        # The host's log has what the guest wrote while nobody watched; else what this daemon
        # read in earlier sessions.
        from_log = (
            read_tail(log_file, size, rotated=self._settings.log_rotated) if log_file else None
        )
        if from_log is not None:
            return ReplayRing(size, from_log)
        kept = self._kept.pop((*key, uuid), None)
        return kept if kept is not None else ReplayRing(size)

    def leave(self, shared: SharedConsole, subscriber: Subscriber) -> None:
        with self._lock:
            if not shared.unsubscribe(subscriber):
                return
            if self._open.get(shared.key) is shared:
                del self._open[shared.key]
            self._keep(shared)
        shared.close()

    def forget(self, shared: SharedConsole) -> None:
        """The guest's console closed under the sessions."""
        with self._lock:
            if self._open.get(shared.key) is shared:
                del self._open[shared.key]
                self._keep(shared)

    def _keep(self, shared: SharedConsole) -> None:
        self._kept[(*shared.key, shared.uuid)] = shared.ring()
        while len(self._kept) > c.CONSOLE_KEPT_REPLAYS:
            self._kept.popitem(last=False)

    def output_of(self, key: tuple[str, str], uuid: str) -> bytes:
        """What this daemon read of the machine's console and still keeps (its replay ring)."""
        with self._lock:
            shared = self._open.get(key)
            if shared is not None and shared.uuid == uuid:
                return shared.kept()
            kept = self._kept.get((*key, uuid))
            return kept.contents() if kept is not None else b""
