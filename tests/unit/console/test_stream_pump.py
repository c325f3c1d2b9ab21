"""The plugin's one-thread stream (`plugin/pump.py`) against the daemon's port-forward loop
(`process/port_forward.py`), over real socket pairs: the half-close carries a guest's whole answer
after the end of the input, big transfers both ways do not stall, and the plugin answers pings,
leaves when told and gives up on a silent server. Most tests use plain sockets (both loops take
them as they take TLS ones); one runs an echo through TLS with small socket buffers, where TLS
sends stop part way and are finished later (the e2e tests go through the API server's TLS)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import ssl
import struct
import termios
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from libvirt_provider.adapters.plugin.pump import Pump
from libvirt_provider.adapters.process.port_forward import PortBridge
from libvirt_provider.console.framing import (
    CloseCode,
    Frame,
    FrameReader,
    Opcode,
    close_payload,
    encode_frame,
)
from tests.support.tls import contexts, handshaken
from tests.support.waiting import eventually

_DEADLINE = 20.0


def _feed(data: bytes, *, close: bool = True) -> tuple[int, int]:
    """A pipe whose read end holds `data`, written by a thread (it may exceed the pipe's size);
    its write end is closed after unless told otherwise. The two descriptors."""
    read_fd, write_fd = os.pipe()

    def write() -> None:
        view = memoryview(data)
        # A reader that left (a test whose stream broke on purpose) ends the writing; a test
        # that wants the data sees what is missing.
        with contextlib.suppress(OSError):
            while view:
                view = view[os.write(write_fd, view[: 1 << 16]) :]
        if close:
            os.close(write_fd)

    threading.Thread(target=write, daemon=True).start()
    return read_fd, write_fd


class _Guest:
    """A guest's service on a real socket: reads until its input ends, answering as it reads
    (`answer` of each chunk) and, once the input ended, `finally_` of all of it; then closes."""

    def __init__(
        self,
        sock: socket.socket,
        answer: Callable[[bytes], bytes] = lambda data: b"",
        finally_: Callable[[bytes], bytes] = lambda data: b"",
    ) -> None:
        self.received = bytearray()
        self._sock = sock
        self._answer = answer
        self._finally = finally_
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with self._sock:
            while chunk := self._sock.recv(1 << 16):
                self.received += chunk
                if answer := self._answer(chunk):
                    self._sock.sendall(answer)
            if last := self._finally(bytes(self.received)):
                self._sock.sendall(last)

    def join(self) -> None:
        self._thread.join(_DEADLINE)
        assert not self._thread.is_alive(), "the guest's service did not end"


class _Daemon:
    """The daemon's loop on a thread; `why` once it returned."""

    def __init__(self, conn: socket.socket, guest: socket.socket, *, half_close: bool) -> None:
        self.bridge = PortBridge(conn, guest, half_close=half_close)
        self.why: str | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.why = self.bridge.run()

    def join(self) -> str:
        self._thread.join(_DEADLINE)
        assert self.why is not None, "the daemon's loop did not end"
        self.bridge.close()
        return self.why


@pytest.fixture
def wires() -> Iterator[tuple[socket.socket, socket.socket, socket.socket, socket.socket]]:
    """plugin <-> daemon, daemon <-> guest: two connected pairs."""
    plugin, daemon = socket.socketpair()
    bridge_end, guest_end = socket.socketpair()
    yield plugin, daemon, bridge_end, guest_end
    for sock in (plugin, daemon, bridge_end, guest_end):
        sock.close()


def _run_plugin(pump: Pump) -> str:
    started = time.monotonic()
    reason = pump.run()
    assert time.monotonic() - started < _DEADLINE
    return reason


def test_the_half_close_brings_the_guests_whole_answer_after_the_input_ended(
    wires: tuple[socket.socket, ...],
) -> None:
    plugin, daemon_conn, bridge_end, guest_end = wires
    # The guest answers only once its input ended, as `cat` does on a pipe's end or an
    # HTTP/1.0 server after the request: exactly what the close-at-EOF lost.
    guest = _Guest(guest_end, finally_=lambda data: data.upper())
    daemon = _Daemon(daemon_conn, bridge_end, half_close=True)
    line = b"stdio-" + os.urandom(16).hex().encode() + b"\n"
    source, _ = _feed(line)
    out = bytearray()
    pump = Pump(plugin, source=source, sink=out.extend, half_close=True)
    reason = _run_plugin(pump)
    guest.join()
    assert bytes(guest.received) == line
    assert bytes(out) == line.upper()
    assert pump.closed_by_server
    assert reason == "the guest closed the connection"
    assert daemon.join() == "the guest closed the connection"
    os.close(source)


@pytest.fixture(scope="module")
def tls_contexts(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    return contexts(tmp_path_factory.mktemp("tls"), "daemon")


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_megabytes_both_ways_at_once_do_not_stall_either_side(
    wires: tuple[socket.socket, ...],
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
    tls: bool,
) -> None:
    """An echo answers as it reads, so both directions are full at once: with a reading thread
    and a writing thread this held; one thread must never block on a write while the other
    side waits for it to read. Through TLS, with 16 KiB socket buffers most sends stop part way
    and are finished on a later wake-up; every byte still arrives once, in order."""
    plugin, daemon_conn, bridge_end, guest_end = wires
    for sock in wires:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
    if tls:
        plugin, daemon_conn = handshaken(plugin, daemon_conn, tls_contexts, "daemon")
    guest = _Guest(guest_end, answer=lambda chunk: chunk)
    daemon = _Daemon(daemon_conn, bridge_end, half_close=True)
    payload = os.urandom(8 << 20)
    source, _ = _feed(payload)
    out = bytearray()
    _run_plugin(Pump(plugin, source=source, sink=out.extend, half_close=True))
    guest.join()
    assert len(out) == len(payload)
    assert bytes(out) == payload
    assert daemon.join() == "the guest closed the connection"
    assert daemon.bridge.tally.to_guest == daemon.bridge.tally.from_guest == len(payload)
    os.close(source)


def test_a_connection_that_breaks_while_the_plugin_sends_ends_the_stream_with_the_reason(
    wires: tuple[socket.socket, ...], tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    """The plugin sends out of a view of its queue; a TLS send that fails keeps its argument in
    the exception's traceback, which once made dropping the queue raise BufferError instead of
    ending the stream with the connection's failure."""
    plugin_raw, daemon_raw, _bridge_end, _guest_end = wires
    plugin_raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
    plugin, daemon_tls = handshaken(plugin_raw, daemon_raw, tls_contexts, "daemon")
    source, _ = _feed(os.urandom(4 << 20))
    join = _in_thread(Pump(plugin, source=source, sink=lambda data: None, half_close=True))
    # The daemon's end reads a little, then goes away without a word.
    daemon_tls.recv(1024)
    daemon_tls.close()
    assert join().startswith("the connection failed")
    os.close(source)


def test_without_the_half_close_the_end_of_input_closes_after_delivering_what_was_sent(
    wires: tuple[socket.socket, ...],
) -> None:
    """A daemon of an earlier release (the console's subprotocol): the input's end is a close
    frame, the daemon writes what came before it to the guest and closes."""
    plugin, daemon_conn, bridge_end, guest_end = wires
    guest = _Guest(guest_end)
    daemon = _Daemon(daemon_conn, bridge_end, half_close=False)
    source, _ = _feed(b"x" * 300_000)
    pump = Pump(plugin, source=source, sink=lambda data: None, half_close=False)
    _run_plugin(pump)
    assert pump.closed_by_server
    assert daemon.join() == "the client closed the stream"
    guest.join()  # the daemon closed its end once the stream was over
    assert len(guest.received) == 300_000
    os.close(source)


def test_data_after_the_half_close_is_a_protocol_error(
    wires: tuple[socket.socket, ...],
) -> None:
    plugin, daemon_conn, bridge_end, _guest_end = wires
    daemon = _Daemon(daemon_conn, bridge_end, half_close=True)
    mask = b"\x01\x02\x03\x04"
    plugin.sendall(encode_frame(Opcode.BINARY, b"", mask=mask))
    plugin.sendall(encode_frame(Opcode.BINARY, b"late", mask=mask))
    assert daemon.join() == "protocol error: data after the end of the client's input"
    reader = FrameReader(max_payload=1 << 20, require_mask=False)
    frames = []
    plugin.settimeout(_DEADLINE)
    while not any(f.opcode == Opcode.CLOSE for f in frames):
        frames += reader.feed(plugin.recv(4096))
    close = next(f for f in frames if f.opcode == Opcode.CLOSE)
    assert close.payload[:2] == int(CloseCode.PROTOCOL_ERROR).to_bytes(2, "big")


class _FakeServer:
    """The server's side of a WebSocket written by hand from the framing module, to see exactly
    what the plugin sends."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(_DEADLINE)
        self._reader = FrameReader(max_payload=1 << 20)
        self._frames: list[Frame] = []

    def send(self, opcode: Opcode, payload: bytes = b"") -> None:
        self.sock.sendall(encode_frame(opcode, payload))

    def next_frame(self) -> tuple[Opcode, bytes]:
        while not self._frames:
            data = self.sock.recv(4096)
            assert data, "the plugin closed the connection"
            self._frames += self._reader.feed(data)
        frame = self._frames.pop(0)
        return frame.opcode, frame.payload


def _unread(fd: int) -> int:
    """Bytes waiting in a pipe's read end."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


def _in_thread(pump: Pump) -> Callable[[], str]:
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(pump.run()), daemon=True)
    thread.start()

    def join() -> str:
        thread.join(_DEADLINE)
        assert result, "the plugin's loop did not end"
        return result[0]

    return join


def test_the_plugin_answers_pings_delivers_data_and_ends_on_the_servers_close() -> None:
    plugin, server_end = socket.socketpair()
    server = _FakeServer(server_end)
    out = bytearray()
    join = _in_thread(Pump(plugin, sink=out.extend))
    server.send(Opcode.PING, b"vmapi")
    assert server.next_frame() == (Opcode.PONG, b"vmapi")
    server.send(Opcode.BINARY, b"hello")
    server.send(Opcode.CLOSE, close_payload(CloseCode.NORMAL, "all sent"))
    opcode, payload = server.next_frame()
    assert (opcode, payload[:2]) == (Opcode.CLOSE, int(CloseCode.NORMAL).to_bytes(2, "big"))
    assert join() == "all sent"
    assert bytes(out) == b"hello"
    plugin.close()
    server_end.close()


def test_leaving_sends_what_was_typed_then_a_close_and_waits_for_the_servers() -> None:
    plugin, server_end = socket.socketpair()
    server = _FakeServer(server_end)
    source, write_end = _feed(b"ls\x1d", close=False)

    def leave_at_escape(data: bytes) -> tuple[bytes, bool]:
        head, escape, _ = data.partition(b"\x1d")
        return head, bool(escape)

    join = _in_thread(Pump(plugin, sink=lambda d: None, source=source, transform=leave_at_escape))
    assert server.next_frame() == (Opcode.BINARY, b"ls")
    opcode, _ = server.next_frame()
    assert opcode == Opcode.CLOSE
    server.send(Opcode.CLOSE, close_payload(CloseCode.NORMAL, "bye"))
    assert join() == "bye"
    for fd in (source, write_end):
        os.close(fd)
    plugin.close()
    server_end.close()


def test_a_silent_server_is_given_up_on() -> None:
    plugin, server_end = socket.socketpair()
    reason = Pump(plugin, sink=lambda d: None, silence=0.3).run()
    assert reason == "the server stopped answering"
    plugin.close()
    server_end.close()


def test_a_local_side_that_went_away_ends_the_stream_with_a_close() -> None:
    plugin, server_end = socket.socketpair()
    server = _FakeServer(server_end)

    def broken(data: bytes) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    join = _in_thread(Pump(plugin, sink=broken))
    server.send(Opcode.BINARY, b"nobody reads this")
    opcode, _ = server.next_frame()
    assert opcode == Opcode.CLOSE
    server.send(Opcode.CLOSE, close_payload(CloseCode.NORMAL))
    assert join() == ""
    plugin.close()
    server_end.close()


def test_at_the_end_of_its_input_the_plugin_waits_for_a_slow_server_past_the_close_wait() -> None:
    """A piped paste: the input ends at once, the guest takes it at its serial line's pace. The
    plugin leaves only when the server closed, after the last byte, not `close_wait` after the
    input's end (it used to, dropping what it had not sent yet)."""
    plugin, server_end = socket.socketpair()
    plugin.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    server_end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    server = _FakeServer(server_end)
    pasted = os.urandom(600_000)
    # The whole paste in the pipe before the plugin starts (its input's end is then the pipe
    # found empty), rather than fed by a thread.
    source, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 1 << 20)
    os.write(write_end, pasted)
    os.close(write_end)
    result: list[str] = []
    thread = threading.Thread(
        target=lambda: result.append(
            Pump(plugin, sink=lambda d: None, source=source, close_wait=0.05).run()
        ),
        daemon=True,
    )
    thread.start()
    # A slow guest: the server reads nothing until the plugin has read all of its input, then
    # gives it twenty times the close wait to leave, which it must not do with bytes unsent.
    eventually(
        lambda: _unread(source) == 0,
        timeout=_DEADLINE,
        interval=0.01,
        what="the plugin reading all of its input",
    )
    thread.join(timeout=1.0)
    assert thread.is_alive(), f"the plugin left with its paste unsent: {result}"
    got = bytearray()
    while True:
        opcode, payload = server.next_frame()
        if opcode == Opcode.CLOSE:
            break
        got += payload
    assert bytes(got) == pasted
    server.send(Opcode.CLOSE, close_payload(CloseCode.NORMAL))
    thread.join(_DEADLINE)
    assert result == [""]
    os.close(source)
    plugin.close()
    server_end.close()


def test_after_the_end_of_its_input_a_silent_server_is_still_given_up_on() -> None:
    plugin, server_end = socket.socketpair()
    source, _ = _feed(b"ls\n")
    reason = Pump(plugin, sink=lambda d: None, source=source, silence=0.3).run()
    assert reason == "the server stopped answering"
    os.close(source)
    plugin.close()
    server_end.close()
