"""Remote hosts' console logs, the shell (adapters/process/console_keeper.py): a running machine's
console held open by a keeper that writes every chunk to a rotated file, shared with sessions (one
stream), opened again after the stream ends only after its backoff, closed when the machine stops
(files kept) and forgotten with its files when it is gone; a console that cannot be opened is
skipped quietly. Its passes are driven by hand here (no thread)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from libvirt_provider.adapters.process.console_keeper import ConsoleKeeper, KeptHost, RotatingLog
from libvirt_provider.adapters.process.console_share import ConsoleHub, SharingSettings, read_tail
from libvirt_provider.console.keeping import KeptMachine
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor
from libvirt_provider.errors import UnsupportedError

UID = "3b1c0f8e-0000-4000-8000-000000000001"


class _Stream:
    def __init__(self, on_output: Callable[[bytes], bool], on_closed: Callable[[str], None]):
        self.on_output = on_output
        self.on_closed = on_closed
        self.closed = False

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class _Hypervisor:
    def __init__(self) -> None:
        self.streams: list[_Stream] = []
        self.refuse: str | None = None

    def open_console(self, uuid: str, on_output: Any, on_closed: Any) -> _Stream:
        assert uuid == UID
        if self.refuse:
            raise UnsupportedError(self.refuse)
        self.streams.append(_Stream(on_output, on_closed))
        return self.streams[-1]


class _Session:
    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.replayed: list[bytes] = []

    def output(self, data: bytes) -> bool:
        self.got.append(data)
        return True

    def replay(self, data: bytes) -> None:
        self.replayed.append(data)

    def closed(self, reason: str) -> None:
        pass


class _Lab:
    def __init__(self, folder: Path, limit: int = 1000) -> None:
        self.hv = _Hypervisor()
        self.machines = [KeptMachine("team-a", "vm", UID, "dom-vm", True)]
        self.served = True
        self.hub = ConsoleHub(SharingSettings(replay_bytes=8, log_dir=str(folder), log_rotated=1))
        self.keeper = ConsoleKeeper(self.hub, self.hosts, folder=str(folder), limit=limit)
        self.log = folder / "dom-vm.serial.log"

    def hosts(self) -> list[KeptHost]:
        if not self.served:
            return []
        hv = cast(LibvirtHypervisor, self.hv)
        return [KeptHost("remote-1", hv, lambda: list(self.machines))]

    def run(self, *, running: bool | None = None) -> None:
        if running is not None:
            self.machines = [KeptMachine("team-a", "vm", UID, "dom-vm", running)]
        self.keeper._pass()


def test_a_running_machines_output_is_kept_while_nobody_watches_and_shared_with_sessions(
    tmp_path: Path,
) -> None:
    lab = _Lab(tmp_path)
    lab.run()
    assert len(lab.hv.streams) == 1
    stream = lab.hv.streams[0]
    # The keeper never pauses the guest.
    assert stream.on_output(b"VMAPI-GUEST-BOOTED\n") is True
    assert lab.log.read_bytes() == b"VMAPI-GUEST-BOOTED\n"
    # A session joins the keeper's stream (libvirt gives a console to one stream at a time).
    session = _Session()
    shared = lab.hub.join(
        ("team-a", "vm"),
        UID,
        cast(LibvirtHypervisor, lab.hv),
        session,
        log_file=str(lab.log),
        replay=True,
    )
    assert len(lab.hv.streams) == 1
    stream.on_output(b"echo hi\n")
    assert session.got == [b"echo hi\n"]
    lab.hub.leave(shared, session)
    assert not stream.closed, "the keeper still holds the stream"
    stream.on_output(b"hi\n")
    assert lab.log.read_bytes() == b"VMAPI-GUEST-BOOTED\necho hi\nhi\n"
    lab.run()
    assert len(lab.hv.streams) == 1, "one keeper per machine"


def test_the_log_rotates_at_its_bound_and_logs_read_across_the_rotation(tmp_path: Path) -> None:
    lab = _Lab(tmp_path, limit=10)
    lab.run()
    out = lab.hv.streams[0].on_output
    for chunk in (b"aaaaaa", b"bbbbbb", b"cccccc", b"0123456789ABCDEF"):
        out(chunk)
        assert lab.log.stat().st_size <= 10
    rotated = Path(f"{lab.log}.1")
    assert rotated.read_bytes() == b"cccccc"
    assert lab.log.read_bytes() == b"6789ABCDEF"  # a chunk bigger than a file: its end
    assert read_tail(str(lab.log), 12, rotated=1) == b"cc6789ABCDEF"
    assert read_tail(str(lab.log), 1 << 20, rotated=1) == b"cccccc6789ABCDEF"
    # A local host's log: its current file only (virtlogd names its backups its own way).
    assert read_tail(str(lab.log), 1 << 20) == b"6789ABCDEF"


def test_a_write_that_fails_drops_the_output_and_never_pauses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = RotatingLog(str(tmp_path / "x.serial.log"), 100)
    log._file.close()
    log._file = open("/dev/full", "ab", buffering=0)  # noqa: SIM115
    with caplog.at_level(logging.WARNING):
        log.write(b"x")
        log.write(b"y")
    assert sum("cannot write" in r.getMessage() for r in caplog.records) == 1
    log.close()


def test_an_ended_stream_is_opened_again_after_its_backoff_only(tmp_path: Path) -> None:
    lab = _Lab(tmp_path)
    lab.run()
    lab.hv.streams[0].on_output(b"one\n")
    lab.hv.streams[0].on_closed("reading the console failed: connection lost")
    lab.run()
    assert len(lab.hv.streams) == 1, "not at once: after the backoff"
    held = lab.keeper._held[("team-a", "vm", UID)]
    assert not held.state.open
    assert held.state.retry_at > 0
    held.state = replace(held.state, retry_at=0.0)
    lab.run()
    assert len(lab.hv.streams) == 2
    lab.hv.streams[1].on_output(b"two\n")
    assert lab.log.read_bytes() == b"one\ntwo\n"


def test_a_stopped_machine_keeps_its_log_and_a_deleted_one_loses_it(tmp_path: Path) -> None:
    lab = _Lab(tmp_path)
    lab.run()
    lab.hv.streams[0].on_output(b"bye\n")
    lab.run(running=False)
    assert lab.hv.streams[0].closed
    assert lab.log.read_bytes() == b"bye\n"
    assert read_tail(str(lab.log), 100, rotated=1) == b"bye\n"
    lab.run(running=True)
    assert len(lab.hv.streams) == 2
    Path(f"{lab.log}.1").write_bytes(b"old")
    lab.machines = []
    lab.run()
    assert lab.hv.streams[1].closed
    assert list(tmp_path.iterdir()) == []


def test_a_host_handed_back_takes_its_logs_and_streams_with_it(tmp_path: Path) -> None:
    lab = _Lab(tmp_path)
    lab.run()
    lab.served = False
    lab.run()
    assert lab.hv.streams[0].closed
    assert not lab.log.exists()


def test_a_console_that_cannot_be_opened_is_skipped_quietly_with_a_backoff(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lab = _Lab(tmp_path)
    lab.hv.refuse = "this function is not supported by the connection driver"
    with caplog.at_level(logging.INFO):
        lab.run()
        lab.run()
    assert lab.hv.streams == []
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []
    held = lab.keeper._held[("team-a", "vm", UID)]
    assert held.failures == 1, "the second pass waited for the backoff"


def test_stopping_closes_the_streams_and_keeps_the_files(tmp_path: Path) -> None:
    lab = _Lab(tmp_path)
    lab.run()
    lab.hv.streams[0].on_output(b"kept\n")
    lab.keeper.stop()
    assert lab.hv.streams[0].closed
    assert lab.log.read_bytes() == b"kept\n"


def test_a_machine_restarted_soon_after_its_stream_ended_is_kept_again_at_once(
    tmp_path: Path,
) -> None:
    lab = _Lab(tmp_path)
    lab.run()
    lab.hv.streams[0].on_closed("the guest's console closed")
    lab.run()  # the stream's end noted: a retry waits for the backoff
    lab.run(running=False)  # then its status says it stopped: the backoff is cleared
    lab.run(running=True)
    assert len(lab.hv.streams) == 2
