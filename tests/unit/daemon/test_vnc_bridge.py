"""The VNC session's bridge (adapters/process/vnc_server.py) between a client's WebSocket and the
display's socket, over socket pairs: bytes through unchanged both ways, and each way a session
ends (the client's close frame, the display closing, the daemon stopping) tells the client."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from typing import cast

import pytest

from libvirt_provider.adapters.process.vnc_server import VncBridge, choose_subprotocol
from libvirt_provider.console.framing import (
    CloseCode,
    Frame,
    FrameReader,
    Opcode,
    close_payload,
    encode_frame,
)

MASK = b"\x01\x02\x03\x04"


class _Plain(socket.socket):
    """A plain socket in place of the TLS one: nothing is ever pending in a TLS buffer."""

    def pending(self) -> int:
        return 0


class _Session:
    def __init__(self) -> None:
        server, self.client = socket.socketpair()
        self.display_end, display = socket.socketpair()
        conn = _Plain(fileno=server.detach())
        self.bridge = VncBridge(cast(ssl.SSLSocket, conn), display)
        self.why: list[str] = []
        self.thread = threading.Thread(target=lambda: self.why.append(self.bridge.run()))
        self.client.settimeout(10)
        self.display_end.settimeout(10)
        self._reader = FrameReader(max_payload=1 << 20, require_mask=False)
        self._frames: list[Frame] = []
        self.thread.start()

    def frame(self) -> Frame:
        while not self._frames:
            self._frames += self._reader.feed(self.client.recv(65536))
        return self._frames.pop(0)

    def ended(self) -> str:
        self.thread.join(10)
        assert not self.thread.is_alive()
        self.bridge.close()
        return self.why[0]


@pytest.fixture
def session() -> Iterator[_Session]:
    made = _Session()
    yield made
    made.bridge.closed("test over")
    made.thread.join(10)
    made.bridge.close()
    made.client.close()
    made.display_end.close()


def test_bytes_go_through_unchanged_both_ways(session: _Session) -> None:
    session.display_end.sendall(b"RFB 003.008\n")
    first = session.frame()
    assert (first.opcode, first.payload) == (Opcode.BINARY, b"RFB 003.008\n")
    session.client.sendall(encode_frame(Opcode.BINARY, b"RFB 003.008\n", mask=MASK))
    assert session.display_end.recv(100) == b"RFB 003.008\n"
    session.client.sendall(encode_frame(Opcode.PING, b"hi", mask=MASK))
    pong = session.frame()
    assert (pong.opcode, pong.payload) == (Opcode.PONG, b"hi")


def test_the_clients_close_frame_ends_the_session_and_is_answered(session: _Session) -> None:
    session.client.sendall(encode_frame(Opcode.CLOSE, close_payload(CloseCode.NORMAL), mask=MASK))
    assert session.frame().opcode == Opcode.CLOSE
    assert session.ended() == "the client closed the session"


def test_the_display_closing_tells_the_client(session: _Session) -> None:
    session.display_end.close()
    goodbye = session.frame()
    assert goodbye.opcode == Opcode.CLOSE
    assert b"the guest's display closed" in goodbye.payload
    assert session.ended() == "the guest's display closed"


def test_the_daemon_stopping_ends_the_session_with_its_reason(session: _Session) -> None:
    session.bridge.closed("the daemon is stopping")
    goodbye = session.frame()
    assert goodbye.opcode == Opcode.CLOSE
    assert b"the daemon is stopping" in goodbye.payload
    assert session.ended() == "the daemon is stopping"


def test_an_unmasked_client_frame_is_a_protocol_error(session: _Session) -> None:
    session.client.sendall(encode_frame(Opcode.BINARY, b"x"))
    assert session.frame().opcode == Opcode.CLOSE
    assert session.ended().startswith("protocol error")


def test_the_subprotocol_is_virtctls_or_websockifys() -> None:
    assert choose_subprotocol(["binary", "plain.kubevirt.io"]) == "plain.kubevirt.io"
    assert choose_subprotocol(["binary"]) == "binary"
    assert choose_subprotocol(["base64"]) is None
