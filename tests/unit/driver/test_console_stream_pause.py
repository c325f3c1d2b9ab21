"""The console stream's pause and resume: a resume that overtakes its pause is never lost.

libvirt's event thread hands output to the bridge and, when the bridge's queue is full, records a
pause; the bridge, draining on its own thread, asks to resume. Here the resume comes in between
(inside the sink, the exact interleaving), which used to leave the stream paused for good.
"""

from __future__ import annotations

from typing import Any

from libvirt_provider.driver.libvirt_console import LibvirtConsoleStream


class _Stream:
    """libvirt's virStream as the console reads it: chunks, then "would block"."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.updates: list[int] = []

    def recv(self, _n: int) -> Any:
        return self.chunks.pop(0) if self.chunks else -2

    def eventUpdateCallback(self, events: int) -> None:  # noqa: N802 (libvirt's name)
        self.updates.append(events)


def test_a_resume_that_overtakes_its_pause_keeps_the_stream_reading() -> None:
    raw = _Stream([b"a", b"b"])
    seen: list[bytes] = []
    console: LibvirtConsoleStream

    def sink(data: bytes) -> bool:
        seen.append(data)
        if data == b"a":
            console.resume_reading()  # the bridge drained before the pause was recorded
            return False
        return True

    console = LibvirtConsoleStream(raw, sink, lambda _why: None)  # type: ignore[arg-type]
    console._read_available()
    assert seen == [b"a", b"b"]
    assert console._reading


def test_a_pause_without_a_resume_stops_reading_until_resumed() -> None:
    raw = _Stream([b"a", b"b"])
    seen: list[bytes] = []
    console = LibvirtConsoleStream(
        raw,  # type: ignore[arg-type]
        lambda d: bool(seen.append(d)),  # type: ignore[func-returns-value]
        lambda _why: None,
    )
    console._read_available()
    assert seen == [b"a"]
    assert not console._reading
    console.resume_reading()
    assert console._reading
    console._read_available()
    assert seen == [b"a", b"b"]
