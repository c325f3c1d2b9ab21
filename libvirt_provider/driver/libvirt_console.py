"""A guest's serial console as a non-blocking libvirt stream (`virDomainOpenConsole`).

The stream is opened through the connection's call discipline (`_call`: the limiter, the error
translation, the shared connection, which also works over a remote URI). Afterwards nothing blocks
on it: output arrives in callbacks of libvirt's event loop thread (`libvirt_connection`), which
hand each chunk to `on_output`; a consumer that is full says so by returning False, and reading
pauses until `resume_reading`. Input is sent from the caller's thread; when libvirt's buffer is
full the sender waits for the stream's writable event, bounded by a deadline. Every stream call
holds the stream's lock, so the event thread and the sender never interleave inside libvirt.
libvirt's send in fact blocks while the connection's socket to libvirtd is full (the lab never
saw it answer "would block"), so input goes in `CONSOLE_INPUT_CHUNK` pieces: the lock, which the
event thread needs to read this console's output, is held for one piece at a time.

The console is opened with `VIR_DOMAIN_CONSOLE_FORCE`: a session this daemon left behind (a
crashed client) never keeps the console; one writer per machine is the session registry's job
(`console/sessions.py`). The serial device's `<log>` file is written by qemu beside any stream, so
`--console-log-dir` keeps logging while a console is open.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

import libvirt

from libvirt_provider.constants import CONSOLE_INPUT_CHUNK, CONSOLE_READ_CHUNK
from libvirt_provider.driver.libvirt_connection import LibvirtConnection
from libvirt_provider.driver.libvirt_errors import translated
from libvirt_provider.errors import RetryableError

__all__ = ["LibvirtConsoleStream", "LibvirtConsoles", "OutputSink"]

log = logging.getLogger(__name__)

# Called on libvirt's event thread with each chunk of output; False: pause reading.
OutputSink = Callable[[bytes], bool]

_STREAM_EAGAIN = -2
_ENDS = libvirt.VIR_STREAM_EVENT_ERROR | libvirt.VIR_STREAM_EVENT_HANGUP


class LibvirtConsoleStream:
    """One open console: bytes out through `on_output`, bytes in through `send`."""

    def __init__(
        self,
        stream: libvirt.virStream,
        on_output: OutputSink,
        on_closed: Callable[[str], None],
    ) -> None:
        self._stream = stream
        self._on_output = on_output
        self._on_closed = on_closed
        self._lock = threading.Lock()
        self._writable = threading.Condition(self._lock)
        self._closed = False
        self._reading = True
        # A resume that came while the pause it answers was not recorded yet (the sink said
        # "pause" and the bridge drained before this thread took the lock): the pause is skipped.
        self._resume_pending = False
        self._want_write = False

    def start(self) -> None:
        with self._lock, translated():
            self._stream.eventAddCallback(self._events_locked(), self._on_event, None)

    def _events_locked(self) -> int:
        events = _ENDS
        if self._reading:
            events |= libvirt.VIR_STREAM_EVENT_READABLE
        if self._want_write:
            events |= libvirt.VIR_STREAM_EVENT_WRITABLE
        return int(events)

    def _update_locked(self) -> None:
        if not self._closed:
            with contextlib.suppress(libvirt.libvirtError):
                self._stream.eventUpdateCallback(self._events_locked())

    def _on_event(self, _stream: libvirt.virStream, events: int, _opaque: object) -> None:
        if events & libvirt.VIR_STREAM_EVENT_WRITABLE:
            with self._lock:
                self._want_write = False
                self._writable.notify_all()
                self._update_locked()
        if events & libvirt.VIR_STREAM_EVENT_READABLE:
            self._read_available()
        elif events & _ENDS:
            self._finish("the guest's console closed")

    def _read_available(self) -> None:
        while True:
            with self._lock:
                if self._closed or not self._reading:
                    return
                try:
                    data = self._stream.recv(CONSOLE_READ_CHUNK)
                except libvirt.libvirtError as err:
                    reason = f"reading the console failed: {err.get_error_message() or err}"
                    data = None
                if isinstance(data, int) and data == _STREAM_EAGAIN:
                    return
            if data is None:
                self._finish(reason)
                return
            if not data:
                self._finish("the guest's console closed")
                return
            if not self._on_output(bytes(data)):
                with self._lock:
                    if self._resume_pending:
                        self._resume_pending = False
                        continue
                    self._reading = False
                    self._update_locked()
                return

    def resume_reading(self) -> None:
        """Read again after `on_output` asked for a pause (whether or not the pause has taken
        effect yet)."""
        with self._lock:
            if self._closed:
                return
            if self._reading:
                self._resume_pending = True
                return
            self._reading = True
            self._update_locked()

    def send(self, data: bytes, *, timeout: float) -> None:
        """Write all of `data` to the console within `timeout` seconds, or raise
        `RetryableError` (closed, failed or stuck)."""
        deadline = time.monotonic() + timeout
        view = memoryview(data)
        with self._lock:
            while view:
                if self._closed:
                    raise RetryableError("the console is closed")
                try:
                    sent = self._stream.send(bytes(view[:CONSOLE_INPUT_CHUNK]))
                except libvirt.libvirtError as err:
                    raise RetryableError(
                        f"writing to the console failed: {err.get_error_message() or err}"
                    ) from err
                if sent == _STREAM_EAGAIN:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise RetryableError("the guest's console takes no input")
                    self._want_write = True
                    self._update_locked()
                    self._writable.wait(left)
                    continue
                view = view[sent:]

    def close(self) -> None:
        """Release the console (idempotent); `on_closed` is not called for this."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._writable.notify_all()
            self._release_locked()

    def _release_locked(self) -> None:
        with contextlib.suppress(libvirt.libvirtError):
            self._stream.eventRemoveCallback()
        with contextlib.suppress(libvirt.libvirtError):
            self._stream.abort()

    def _finish(self, reason: str) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._writable.notify_all()
            self._release_locked()
        self._on_closed(reason)


class LibvirtConsoles(LibvirtConnection):
    def open_console(
        self, uuid: str, on_output: OutputSink, on_closed: Callable[[str], None]
    ) -> LibvirtConsoleStream:
        """Open the domain's serial console; output starts flowing at once."""

        def opened(conn: libvirt.virConnect) -> libvirt.virStream:
            dom = self._domain(conn, uuid)
            stream = conn.newStream(libvirt.VIR_STREAM_NONBLOCK)
            try:
                dom.openConsole(None, stream, libvirt.VIR_DOMAIN_CONSOLE_FORCE)
            except libvirt.libvirtError:
                with contextlib.suppress(libvirt.libvirtError):
                    stream.abort()
                raise
            return stream

        console = LibvirtConsoleStream(self._call(opened), on_output, on_closed)
        try:
            console.start()
        except BaseException:
            console.close()
            raise
        log.info("host %s: console of domain %s opened", self._host, uuid)
        return console
