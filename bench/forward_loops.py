"""CPU per MiB of port-forward's two Python loops, the plugin's `Pump` and the daemon's
`PortBridge`, with TLS between them as in production but no API server and no guest.

Why it exists: in the lab every process of a forwarded stream (the plugin, the API server, the
daemon, the guest's qemu, the client) shares two cores, so the lab's throughput figure
(`console_bench.py`) moves with everything else on the machine. This one isolates what the
project's own code spends: each loop runs in a process of its own and reports its thread's CPU
time (`time.thread_time`), which a busy machine changes far less than it changes throughput.

Three processes on 127.0.0.1: a "guest" TCP server (a sink, zeros until a size, or an echo), the
daemon's side (a TLS server; each connection is bridged to the guest server by a `PortBridge`, as
after the WebSocket upgrade) and the plugin's side (a `Pump` on a TLS connection to it, its input
a socketpair fed by a thread with `--mib` MiB, or closed at once to download). Per kind of round
(upload, download, echo): MiB/s, and the plugin's and the daemon's CPU in ms per MiB carried.
Bytes are counted, not compared (the e2e tests check content). Nothing leaves loopback.

usage: .venv/bin/python bench/forward_loops.py [--mib 256] [--rounds 3] [--smoke]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from libvirt_provider.adapters.plugin.pump import Pump  # noqa: E402
from libvirt_provider.adapters.process.daemon import (  # noqa: E402
    MALLOC_ARENAS,
    MMAP_THRESHOLD_BYTES,
)
from libvirt_provider.adapters.process.heap import Heap  # noqa: E402
from libvirt_provider.adapters.process.port_forward import PortBridge  # noqa: E402
from libvirt_provider.constants import PORTFORWARD_BATCH  # noqa: E402
from tests.support.tls import self_signed  # noqa: E402

MIB = 1 << 20
KINDS = ("upload", "download", "echo")
_CHUNK = 1 << 20


def _guest(listener: socket.socket) -> None:
    """One connection at a time; its first byte says the kind (u, d, e), then 8 bytes the size."""
    zeros = memoryview(bytes(_CHUNK))
    buffer = bytearray(_CHUNK)
    while True:
        conn, _ = listener.accept()
        with conn:
            head = b""
            while len(head) < 9:
                head += conn.recv(9 - len(head))
            kind, size = head[:1], int.from_bytes(head[1:], "big")
            if kind == b"d":
                left = size
                while left:
                    left -= conn.send(zeros[: min(left, _CHUNK)])
                continue
            while count := conn.recv_into(buffer):
                if kind == b"e":
                    conn.sendall(memoryview(buffer)[:count])


def _daemon(
    listener: socket.socket, cert: Path, key: Path, guest_port: int, out: Connection
) -> None:
    # The daemon's own malloc settings: blocks from MMAP_THRESHOLD_BYTES on are mapped apart,
    # which makes a stream's transient buffers of that size cost page faults.
    heap = Heap()
    heap.limit_arenas(MALLOC_ARENAS)
    heap.fix_mmap_threshold(MMAP_THRESHOLD_BYTES)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    while True:
        raw, _ = listener.accept()
        conn = context.wrap_socket(raw, server_side=True)
        guest = socket.create_connection(("127.0.0.1", guest_port))
        guest.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        header = conn.recv(9)  # the plugin says the kind first, as the URL would
        guest.sendall(header)
        bridge = PortBridge(conn, guest, half_close=True)
        spent = time.thread_time()
        bridge.run()
        out.send(time.thread_time() - spent)
        bridge.close()
        conn.close()


def _round(kind: str, size: int, port: int, cert: Path) -> tuple[float, float]:
    """One stream through the plugin's loop: its seconds and the loop's CPU seconds."""
    context = ssl.create_default_context(cafile=str(cert))
    sock = context.wrap_socket(
        socket.create_connection(("localhost", port)), server_hostname="localhost"
    )
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(kind[:1].encode() + size.to_bytes(8, "big"))
    feed, source = socket.socketpair()
    received = 0

    def sink(data: bytes) -> None:
        nonlocal received
        received += len(data)

    def write() -> None:
        with feed:
            if kind != "download":
                chunk = memoryview(os.urandom(_CHUNK))
                left = size
                while left:
                    left -= feed.send(chunk[: min(left, _CHUNK)])

    feeder = threading.Thread(target=write, daemon=True)
    started = time.monotonic()
    feeder.start()
    pump = Pump(sock, sink=sink, source=source.fileno(), half_close=True)
    spent = time.thread_time()
    pump.run()
    spent = time.thread_time() - spent
    took = time.monotonic() - started
    feeder.join()
    source.close()
    sock.close()
    expected = 0 if kind == "upload" else size
    if received != expected:
        raise SystemExit(f"forward_loops: {kind}: {received} of {expected} bytes came back")
    return took, spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="one round of 4 MiB")
    args = parser.parse_args()
    if args.smoke:
        args.mib, args.rounds = 4, 1
    size = int(args.mib * MIB)
    workdir = Path(tempfile.mkdtemp(prefix="forward-loops-"))
    cert, key = self_signed(workdir, "localhost")
    guest_listener = socket.create_server(("127.0.0.1", 0))
    daemon_listener = socket.create_server(("127.0.0.1", 0))
    ours, theirs = multiprocessing.Pipe()
    context = multiprocessing.get_context("fork")
    workers = [
        context.Process(target=_guest, args=(guest_listener,), daemon=True),
        context.Process(
            target=_daemon,
            args=(daemon_listener, cert, key, guest_listener.getsockname()[1], theirs),
            daemon=True,
        ),
    ]
    for worker in workers:
        worker.start()
    port = daemon_listener.getsockname()[1]
    figures: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in KINDS}
    try:
        for index in range(args.rounds):
            for kind in KINDS:
                took, plugin_cpu = _round(kind, size, port, cert)
                daemon_cpu = ours.recv()
                carried = size * (2 if kind == "echo" else 1) / MIB
                figures[kind].append((args.mib / took, plugin_cpu, daemon_cpu))
                print(
                    f"round {index + 1} {kind}: {args.mib / took:.0f} MiB/s, CPU per MiB "
                    f"carried: plugin {plugin_cpu / carried * 1000:.2f} ms, daemon "
                    f"{daemon_cpu / carried * 1000:.2f} ms",
                    flush=True,
                )
    finally:
        for worker in workers:
            worker.terminate()
    for kind, rows in figures.items():
        carried = size * (2 if kind == "echo" else 1) / MIB
        print(
            f"{kind}: median {statistics.median(r[0] for r in rows):.0f} MiB/s; CPU per MiB: "
            f"plugin {statistics.median(r[1] for r in rows) / carried * 1000:.2f} ms, daemon "
            f"{statistics.median(r[2] for r in rows) / carried * 1000:.2f} ms"
        )
    print(
        f"batch {PORTFORWARD_BATCH // 1024} KiB; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
