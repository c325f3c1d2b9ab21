"""The daemon's shared console (adapters/process/console_share.py): one libvirt stream per
machine whatever the number of sessions, every session fed every chunk, the replay handed to a
newcomer before any later output, the stream closed with the last session, and the last output
kept for the next one (from the host's log when there is one)."""

from __future__ import annotations

import os
import select
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from libvirt_provider import constants as c
from libvirt_provider.adapters.process.console_server import _Bridge
from libvirt_provider.adapters.process.console_share import ConsoleHub, SharingSettings, read_tail
from libvirt_provider.console.framing import CloseCode, Opcode, close_payload, encode_frame
from libvirt_provider.console.sessions import VIEWER, WRITER
from libvirt_provider.console.sharing import CLIENT_GONE_REASON, input_pieces
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor
from tests.support.waiting import eventually

KEY = ("team-a", "vm")
UUID = "3b1c0f8e-0000-4000-8000-000000000001"


class _Stream:
    def __init__(self, on_output: Callable[[bytes], bool], on_closed: Callable[[str], None]):
        self.on_output = on_output
        self.on_closed = on_closed
        self.sent: list[bytes] = []
        self.closed = False
        self.resumed = 0

    def send(self, data: bytes, *, timeout: float) -> None:
        self.sent.append(data)

    def resume_reading(self) -> None:
        self.resumed += 1

    def close(self) -> None:
        self.closed = True


class _Hypervisor:
    def __init__(self) -> None:
        self.streams: list[_Stream] = []

    def open_console(self, uuid: str, on_output: Any, on_closed: Any) -> _Stream:
        assert uuid == UUID
        self.streams.append(_Stream(on_output, on_closed))
        return self.streams[-1]


class _Session:
    def __init__(self, *, room: bool = True) -> None:
        self.got: list[bytes] = []
        self.replayed: list[bytes] = []
        self.reasons: list[str] = []
        self.room = room

    def output(self, data: bytes) -> bool:
        self.got.append(data)
        return self.room

    def replay(self, data: bytes) -> None:
        assert not self.got, "the replay comes before any output"
        self.replayed.append(data)

    def closed(self, reason: str) -> None:
        self.reasons.append(reason)


def _join(hub: ConsoleHub, hv: _Hypervisor, session: _Session, log: str | None = None) -> Any:
    return hub.join(KEY, UUID, cast(LibvirtHypervisor, hv), session, log_file=log, replay=True)


def test_every_session_of_a_machine_shares_one_stream_and_gets_every_chunk() -> None:
    hv, hub = _Hypervisor(), ConsoleHub(SharingSettings(replay_bytes=6))
    writer, viewer = _Session(room=False), _Session()
    shared = _join(hub, hv, writer)
    hv.streams[0].on_output(b"boot> ")
    assert _join(hub, hv, viewer) is shared
    assert len(hv.streams) == 1
    assert viewer.replayed == [b"boot> "]
    # The writer is full: the guest pauses for it; the viewer got the chunk all the same.
    assert hv.streams[0].on_output(b"ls\n") is False
    assert writer.got == [b"boot> ", b"ls\n"]
    assert viewer.got == [b"ls\n"]
    shared.send(b"x", timeout=1.0)
    assert hv.streams[0].sent == [b"x"]
    # The writer leaves while it paused the guest: reading resumes for the viewer.
    hub.leave(shared, writer)
    assert hv.streams[0].resumed == 1
    assert not hv.streams[0].closed
    hub.leave(shared, viewer)
    assert hv.streams[0].closed
    # The last output is kept for the next session, which opens a new stream.
    assert hub.output_of(KEY, UUID) == b"t> ls\n"
    late = _Session()
    _join(hub, hv, late)
    assert len(hv.streams) == 2
    assert late.replayed == [b"t> ls\n"]


def test_the_hosts_log_seeds_the_replay_and_a_closed_console_ends_every_session(
    tmp_path: Path,
) -> None:
    log = tmp_path / "vm.serial.log"
    log.write_bytes(b"x" * 100 + b"login: ")
    hv, hub = _Hypervisor(), ConsoleHub(SharingSettings(replay_bytes=7))
    one, two = _Session(), _Session()
    _join(hub, hv, one, str(log))
    _join(hub, hv, two, str(log))
    assert one.replayed == two.replayed == [b"login: "]
    hv.streams[0].on_closed("the guest's console closed")
    assert one.reasons == two.reasons == ["the guest's console closed"]
    # Forgotten: the next session opens the console again.
    _join(hub, hv, _Session(), str(log))
    assert len(hv.streams) == 2


def test_read_tail_reads_the_last_bytes_or_nothing(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    assert read_tail(str(path), 4) == b"6789"
    assert read_tail(str(path), 100) == b"0123456789"
    assert read_tail(str(tmp_path / "missing"), 4) is None


def test_a_viewer_too_far_behind_is_cut_off_and_the_writer_pauses_instead() -> None:
    # The bridge's queue side only: its connection is not touched until its loop runs.
    settings = SharingSettings(viewer_backlog_bytes=10)
    viewer = _Bridge(cast(Any, None), VIEWER, settings)
    writer = _Bridge(cast(Any, None), WRITER, settings)
    try:
        assert viewer.output(b"x" * 6)
        assert viewer.output(b"x" * 6)  # cut, never a pause of the guest
        assert viewer.output(b"x" * 6)
        queued = [viewer._output.get_nowait() for _ in range(2)]
        assert queued[0] == b"x" * 6
        assert isinstance(queued[1], str)
        assert "fell more than 10 bytes behind" in queued[1]
        assert viewer._output.empty()
        assert all(writer.output(b"y" * 64) for _ in range(255))
        assert not writer.output(b"y")  # the 256th chunk pauses the guest; nothing dropped
        assert writer._output.qsize() == 256
    finally:
        viewer.close()
        writer.close()


class _PlainSocket(socket.socket):
    """A TCP socket as the bridge takes its TLS one (nothing decrypted ahead)."""

    def pending(self) -> int:
        return 0


class _PastedStream:
    """The shared console as the bridge writes to it: records each piece; `on_piece` runs after
    each one (a client dying in the middle of a paste)."""

    def __init__(self, on_piece: Callable[[int], None] = lambda n: None) -> None:
        self.pieces: list[bytes] = []
        self._on_piece = on_piece

    def send(self, data: bytes, *, timeout: float) -> None:
        self.pieces.append(data)
        self._on_piece(len(self.pieces))

    def resume_reading(self) -> None:
        pass


def _connected() -> tuple[socket.socket, _PlainSocket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    return client, _PlainSocket(fileno=server.detach())


def _bridge_in_thread(bridge: _Bridge, stream: _PastedStream) -> Callable[[], str]:
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(bridge.run(cast(Any, stream))))
    thread.start()

    def join() -> str:
        thread.join(20)
        assert result, "the bridge's loop did not end"
        return result[0]

    return join


def test_input_is_handed_to_the_guest_in_small_pieces_and_nothing_is_lost() -> None:
    assert input_pieces(b"abcdefg", 3) == [b"abc", b"def", b"g"]
    assert input_pieces(b"", 3) == []
    client, server = _connected()
    stream = _PastedStream()
    bridge = _Bridge(server, WRITER, SharingSettings())
    join = _bridge_in_thread(bridge, stream)
    pasted = os.urandom(3 * c.CONSOLE_READ_CHUNK + 5)
    try:
        client.sendall(encode_frame(Opcode.BINARY, pasted, mask=os.urandom(4)))
        client.sendall(encode_frame(Opcode.CLOSE, close_payload(CloseCode.NORMAL), mask=b"abcd"))
        assert join() == "the client closed the session"
    finally:
        client.close()
        server.close()
        bridge.close()
    assert b"".join(stream.pieces) == pasted
    assert max(len(piece) for piece in stream.pieces) == c.CONSOLE_INPUT_CHUNK


def test_a_client_gone_in_the_middle_of_a_paste_ends_the_session_at_once() -> None:
    """Its input still unread on the socket is dropped: the seat is not held while the guest's
    serial line would take it."""
    client, server = _connected()

    def die(pieces: int) -> None:
        if pieces == 2:
            client.close()
            # The FIN has reached the daemon's end before the next piece is considered.
            eventually(lambda: _peer_closed(server), timeout=10, what="the client's FIN")

    stream = _PastedStream(die)
    bridge = _Bridge(server, WRITER, SharingSettings())
    join = _bridge_in_thread(bridge, stream)
    try:
        client.sendall(encode_frame(Opcode.BINARY, os.urandom(c.CONSOLE_READ_CHUNK), mask=b"abcd"))
        assert join() == CLIENT_GONE_REASON
    finally:
        server.close()
        bridge.close()
    assert len(stream.pieces) == 2


def _peer_closed(sock: socket.socket) -> bool:
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLRDHUP)
    return bool(poller.poll(0))
