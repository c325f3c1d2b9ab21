"""Remote hosts' console logs: the daemon serving a remote host holds every running machine's
console open and writes what the guest prints to a rotated file of its own (docs/console.md,
"Remote hosts' console logs"; the decisions are `console/keeping.py`'s).

Each machine's keeper is one more subscriber of the machine's shared console
(`console_share.py`), so the stream stays open while nobody watches and sessions join that same
stream (libvirt gives a console to one stream at a time). It is not a session: it takes no seat,
posts no Event, never counts for idle timeouts or a viewer's backlog, and never pauses the guest
(its `output` always returns True; a write that fails is logged once and dropped).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

from generic.background import BackgroundLoop
from libvirt_provider import constants as c
from libvirt_provider.adapters.process.console_share import ConsoleHub, SharedConsole
from libvirt_provider.console.keeping import (
    KeeperState,
    KeptMachine,
    MachineKey,
    failures_after_end,
    fitting,
    log_files,
    plan,
    retry_delay,
    rotates,
)
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor
from libvirt_provider.errors import ProviderError
from libvirt_provider.naming import console_log_file

__all__ = ["ConsoleKeeper", "KeptHost", "RotatingLog"]

log = logging.getLogger(__name__)


class KeptHost(NamedTuple):
    """A host whose machines' consoles this daemon keeps: its name, its connection, and its
    machines as the daemon's copies have them."""

    name: str
    hypervisor: LibvirtHypervisor
    machines: Callable[[], list[KeptMachine]]


class RotatingLog:
    """One machine's console log: appended to, rotated to `<path>.1` at `limit` bytes."""

    def __init__(self, path: str, limit: int) -> None:
        self.path = path
        self._limit = max(1, limit)
        self._lock = threading.Lock()
        self._failed = False
        self._file = self._open()
        self._size = os.fstat(self._file.fileno()).st_size

    def _open(self) -> io.FileIO:
        # Unbuffered: each chunk is on disk (in the page cache) when `output` returns, so a
        # `--logs` read right after sees it.
        return io.FileIO(self.path, "ab")

    def write(self, data: bytes) -> None:
        data = fitting(data, self._limit)
        with self._lock:
            if self._file.closed:
                return
            try:
                if rotates(self._size, len(data), self._limit):
                    self._rotate_locked()
                self._file.write(data)
                self._size += len(data)
                self._failed = False
            except OSError as err:
                if not self._failed:
                    log.warning("console log %s: cannot write (%s); output dropped", self.path, err)
                self._failed = True

    def _rotate_locked(self) -> None:
        self._file.close()
        files = log_files(self.path)
        # Oldest first: each file moves one place older, the oldest is overwritten.
        for older, newer in itertools.pairwise(files):
            with contextlib.suppress(FileNotFoundError):
                os.replace(newer, older)
        self._file = self._open()
        self._size = 0

    def close(self) -> None:
        with self._lock:
            self._file.close()


class _Keeper:
    """The subscriber that writes one machine's console output to its log."""

    def __init__(self, log_file: RotatingLog) -> None:
        self.log = log_file
        self.opened = time.monotonic()
        self.ended: str | None = None
        self._wake: Callable[[], None] = lambda: None

    def output(self, data: bytes) -> bool:
        self.log.write(data)
        return True

    def replay(self, data: bytes) -> None:
        """The keeper writes only new output: the replay came from its own file."""

    def closed(self, reason: str) -> None:
        self.ended = reason
        self._wake()


@dataclass
class _Held:
    state: KeeperState
    failures: int = 0
    keeper: _Keeper | None = None
    shared: SharedConsole | None = None


class ConsoleKeeper:
    """Keeps the console logs of every running machine of the hosts `hosts` returns."""

    def __init__(
        self,
        hub: ConsoleHub,
        hosts: Callable[[], list[KeptHost]],
        *,
        folder: str,
        limit: int = c.CONSOLE_LOG_BYTES,
        interval: float = c.CONSOLE_KEEPER_SECONDS,
    ) -> None:
        self._hub = hub
        self._hosts = hosts
        self._folder = folder
        self._limit = limit
        self._interval = interval
        self._held: dict[MachineKey, _Held] = {}
        self._loop = BackgroundLoop("console-keeper", self._run)

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        """Close every stream and file (the files stay, for a daemon started again on them)."""
        self._loop.stop(10.0)
        for key in list(self._held):
            self._close(key)
        self._held.clear()

    def path(self, machine: KeptMachine) -> str:
        found = console_log_file(self._folder, machine.domain)
        assert found is not None
        return found

    def _run(self, loop: BackgroundLoop) -> None:
        while not loop.stopping:
            try:
                self._pass()
            except Exception:  # a bug must not end the logs for good
                log.exception("console keeper: pass failed")
            loop.wait(self._interval)

    def _pass(self) -> None:
        now = time.monotonic()
        hosts = {host.name: host for host in self._hosts()}
        self._note_ends(now)
        served = {name: host.machines() for name, host in hosts.items()}
        work = plan(served, {k: h.state for k, h in self._held.items()}, now)
        for key in work.forget:
            self._forget(key)
        for key in work.close:
            self._close(key)
            held = self._held[key]
            held.failures = 0
            held.state = replace(held.state, open=False, retry_at=0.0)
        for host_name, machine in work.open:
            if self._loop.stopping:
                return
            self._open(hosts[host_name], machine, now)

    def _note_ends(self, now: float) -> None:
        """Streams that ended under their keeper (the guest stopped, libvirtd or the connection
        went): closed, and tried again after the backoff while the machine still runs."""
        for key, held in self._held.items():
            keeper = held.keeper
            if keeper is None or keeper.ended is None:
                continue
            self._close(key)
            held.failures = failures_after_end(held.failures, now - keeper.opened)
            delay = retry_delay(held.failures)
            held.state = replace(held.state, open=False, retry_at=now + delay)
            log.info(
                "console log of %s/%s: the stream ended (%s); opened again in %.0f s if it runs",
                key[0],
                key[1],
                keeper.ended,
                delay,
            )

    def _open(self, host: KeptHost, machine: KeptMachine, now: float) -> None:
        held = self._held.get(machine.key)
        if held is None:
            held = _Held(KeeperState(host.name, machine, open=False))
            self._held[machine.key] = held
        path = self.path(machine)
        try:
            log_file = RotatingLog(path, self._limit)
        except OSError as err:
            self._failed(held, now, f"cannot open {path}: {err}", level=logging.WARNING)
            return
        keeper = _Keeper(log_file)
        keeper._wake = self._loop.wake
        try:
            shared = self._hub.join(
                (machine.namespace, machine.name),
                machine.uid,
                host.hypervisor,
                keeper,
                log_file=path,
                replay=False,
            )
        except ProviderError as err:
            log_file.close()
            # Quiet: a driver without consoles (libvirt's test driver) or a domain without a
            # serial port would say so at every try.
            self._failed(held, now, str(err), level=logging.DEBUG)
            return
        held.keeper, held.shared = keeper, shared
        held.state = replace(held.state, machine=machine, open=True, retry_at=0.0)
        log.info(
            "console log of %s/%s on host %s: kept in %s",
            machine.namespace,
            machine.name,
            host.name,
            path,
        )

    def _failed(self, held: _Held, now: float, why: str, *, level: int) -> None:
        held.failures += 1
        delay = retry_delay(held.failures)
        held.state = replace(held.state, open=False, retry_at=now + delay)
        machine = held.state.machine
        log.log(
            level,
            "console log of %s/%s: not kept (%s); trying again in %.0f s",
            machine.namespace,
            machine.name,
            why,
            delay,
        )

    def _close(self, key: MachineKey) -> None:
        held = self._held.get(key)
        if held is None:
            return
        keeper, shared = held.keeper, held.shared
        held.keeper = held.shared = None
        if shared is not None and keeper is not None:
            self._hub.leave(shared, keeper)
        if keeper is not None:
            keeper.log.close()

    def _forget(self, key: MachineKey) -> None:
        held = self._held.get(key)
        if held is None:
            return
        self._close(key)
        del self._held[key]
        for path in log_files(self.path(held.state.machine)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        log.info("console log of %s/%s removed (the machine is gone or not served)", *key[:2])
