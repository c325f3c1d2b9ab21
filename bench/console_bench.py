"""Benchmark of the serial console and port-forward through the lab's API server (issue 25's
figures): what a user waits for and what the daemon spends.

Why it exists: the console's claims (an attach shows output at once, typing feels local, every
viewer sees every byte, idle sessions cost nothing, port-forward is not a bottleneck) are only
worth what they measure; docs/console.md ("Figures") keeps the last run's numbers.

What it does, on one console daemon it starts itself (the e2e tests' wiring:
`tests/support/console.py`, an APIService on an ExternalName Service to localhost) and one busybox
guest it boots in a fresh namespace, every request through the API server with the lab's admin
kubeconfig:
- attach: the time from opening the WebSocket to the first byte of output (the replay), p50/p95
  over `--attaches` attaches as a viewer while nobody else is attached (the daemon opens libvirt's
  console stream afresh and fills the replay from the host's log), the same while a writer is
  attached (the session joins the open stream), and from starting `kubectl vm console --viewer`
  (a new Python process) to the first byte on its stdout, `--plugin-attaches` times;
- keystroke round trip: one byte sent by the writer, through the API server, the daemon and
  libvirt to the guest's shell, whose line editor echoes it, and back the same way; p50/p95 over
  `--keystrokes` keystrokes, each sent once the previous one's echo arrived (the goal in the lab:
  p95 under 50 ms);
- viewers: `--viewers` viewers attached to one machine while the guest's shell prints
  `--output-kib` KiB (`seq`, each line ending in CR LF on the serial line); each viewer's copy of
  what lies between two markers is compared with the expected bytes (length and SHA-256): none
  may be lost, and the run exits 1 if any is;
- idle: the daemon's CPU (utime + stime from /proc/<pid>/stat) over `--idle-seconds` with no
  session, then with the viewers still attached and idle;
- port-forward: `--forward-mib` MiB through busybox `nc` servers in the guest, three kinds of
  round (an echo, a download of zeros, an upload to a sink), each through
  `kubectl vm port-forward` and then through a direct connection made inside the lab's network
  namespace, `--forward-rounds` times; the median ratio of the two throughputs per kind (the
  goal: at least 0.5) and the CPU seconds every process on the way spent on each round. Each
  round is a new connection, so a new WebSocket through the API server and a new dial by the
  daemon: on a few MiB that set-up, not the stream, is most of what is timed (8 MiB rounds
  measured 0.26 to 0.49), hence 256 MiB by default. `--forward-only` boots the guest and
  measures only this;
- paste: `--paste-mib` MiB of random bytes written into `kubectl vm console`'s stdin as fast as
  it takes them (a user's paste), the guest's shell reading them on a raw tty (`stty raw -echo`)
  with `head -c N | md5sum`: bytes sent, the guest's md5 against the sent data's (nothing lost),
  the time and rate (the serial line's input rate), and the RSS of the daemon and of the lab's
  libvirtd before, at their peak (sampled every 0.1 s) and after (memory bounded: neither may
  hold the paste); the run exits 1 if the md5 differs. `--paste-only` boots the guest and
  measures only this;
- the hop: after the rest, with daemons of its own (daemon A on the lab's first extra host, B on
  its second, both taking hops, the APIService naming A: test_hop.py's set-up from
  tests/support/hop.py), keystroke round trips to a guest on A's host (direct) and to one on
  B's host (A forwards the session to B over mutual TLS), `--hop-keystrokes` of each in
  alternate blocks of 20; both p50/p95 and the hop's ratio. `--hop-only` measures only this.

Whatever happens, the daemon is stopped, the APIService removed and the namespace (with its
guest) deleted. Traffic goes only to 127.0.0.1 and, for the direct connection, to the guest inside
the lab's namespace. Needs the lab (`make lab-up`) and root (`ip netns exec`), as the e2e tests.

usage: .venv/bin/python bench/console_bench.py [--attaches 20] [--keystrokes 200] [--viewers 20]
       [--output-kib 1024] [--idle-seconds 15] [--forward-mib 256] [--forward-rounds 5]
       [--forward-only] [--paste-mib 10] [--paste-only]
       [--hop-keystrokes 200] [--hop-only] [--smoke]
--smoke: two attaches of each kind, one plugin start, ten keystrokes, two viewers of 16 KiB, 2 s
idle, one round of 256 KiB forwarded, 64 KiB pasted, ten keystrokes each way of the hop; it still
fails if an attach shows nothing or a byte is lost.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import resource
import select
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import websocket
from kubernetes import client, config

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._figures import p95, wait  # noqa: E402
from libvirt_provider import constants as c  # noqa: E402
from libvirt_provider.console.client import console_path, session_query, websocket_url  # noqa: E402
from libvirt_provider.console.portforward import guest_address  # noqa: E402
from tests.support.console import (  # noqa: E402
    Plugin,
    PortForward,
    plugin_command,
    raw_md5,
    read_raw,
    register_apiservice,
    shell_answers,
    start_console_daemon,
    unregister_apiservice,
)
from tests.support.daemons import stop_daemon  # noqa: E402
from tests.support.factories import pair  # noqa: E402
from tests.support.hop import hop_daemons, hop_pki  # noqa: E402
from tests.support.kube import create, get, namespace  # noqa: E402
from tests.support.lab_access import LabInfo, read_lab  # noqa: E402
from tests.support.memory import PeakSampler, rss_kib  # noqa: E402
from tests.support.port_echo import ROUNDS  # noqa: E402
from tests.support.waiting import GiveUp, TimedOutError, eventually  # noqa: E402

GUEST = "guest"
# The guest's servers for port-forward's rounds: an echo (both directions at once), zeros sent
# until the client leaves (download) and a sink (upload).
FORWARD_PORTS = {"echo": 7000, "download": 7001, "upload": 7002}
KIB = 1 << 10
MIB = 1 << 20
TICKS = os.sysconf("SC_CLK_TCK")


def ms(values: list[float]) -> str:
    return (
        f"p50 {statistics.median(values) * 1e3:.1f} ms, p95 {p95(values) * 1e3:.1f} ms, "
        f"max {max(values) * 1e3:.1f} ms (n={len(values)})"
    )


class Console:
    """One console WebSocket through the API server, its output collected by a thread as it
    comes (pings are answered while it reads), with the time its first byte arrived."""

    def __init__(
        self, cfg: client.Configuration, ns: str, *, viewer: bool, name: str = GUEST
    ) -> None:
        self.opened = time.monotonic()
        self.ws = _connect(cfg, console_path(ns, name) + session_query(viewer=viewer))
        self.upgraded = time.monotonic()
        self.first_byte: float | None = None
        self.closed_reason = ""
        self._out = bytearray()
        self._lock = threading.Lock()
        self._changed = threading.Event()  # set by the reader on each chunk and at the end
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while self._take(*self.ws.recv_data()):
                pass
        except (websocket.WebSocketException, OSError) as err:
            self.closed_reason = self.closed_reason or f"connection ended: {err}"
        self._changed.set()

    def _take(self, opcode: int, data: bytes) -> bool:
        """One frame's bytes kept (the first one's time noted); False at the close frame."""
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            self.closed_reason = data[2:].decode("utf-8", "replace") or "closed"
            return False
        with self._lock:
            if self.first_byte is None and data:
                self.first_byte = time.monotonic()
            self._out += data
        self._changed.set()
        return True

    def _pause(self, seconds: float) -> None:
        """`eventually`'s pause: woken by the next chunk rather than a fixed interval."""
        self._changed.wait(seconds)
        self._changed.clear()

    def size(self) -> int:
        with self._lock:
            return len(self._out)

    def output(self) -> bytes:
        with self._lock:
            return bytes(self._out)

    def find(self, needle: bytes, *, start: int = 0, timeout: float = 60) -> int | None:
        """Until `needle` is in the output from `start` on: the index just after it; None if it
        did not come within `timeout` seconds or the session ended without it."""

        def found() -> int | None:
            ended = not self._thread.is_alive()
            with self._lock:
                at = self._out.find(needle, start)
            if at >= 0:
                return at + len(needle)
            if ended:
                raise GiveUp(self.closed_reason)
            return None

        try:
            return eventually(
                found, timeout=timeout, interval=1.0, what=repr(needle), pause=self._pause
            )
        except (TimedOutError, GiveUp):
            return None

    def wait_for(self, needle: bytes, *, start: int = 0, timeout: float = 60) -> int:
        """`find`, and the end of the script if it does not come."""
        at = self.find(needle, start=start, timeout=timeout)
        if at is None:
            raise SystemExit(
                f"bench: {needle!r} not in the console's output within {timeout:.0f} s "
                f"({self.closed_reason or 'still open'}); its last bytes: {self.output()[-200:]!r}"
            )
        return at

    def wait_first(self, timeout: float = 30) -> float:
        """Until the first byte arrived; its time. The end of the script if none comes."""

        def first() -> float | None:
            ended = not self._thread.is_alive()
            if self.first_byte is None and ended:
                raise GiveUp(self.closed_reason)
            return self.first_byte

        try:
            return eventually(
                first, timeout=timeout, interval=1.0, what="a first byte", pause=self._pause
            )
        except (TimedOutError, GiveUp):
            raise SystemExit(
                f"bench: an attach showed nothing within {timeout:.0f} s "
                f"({self.closed_reason or 'still open'})"
            ) from None

    def type(self, data: bytes) -> None:
        self.ws.send_bytes(data)

    def close(self) -> None:
        with contextlib.suppress(websocket.WebSocketException, OSError):
            self.ws.close()
        self._thread.join(10)


def _connect(cfg: client.Configuration, path: str) -> websocket.WebSocket:
    """A WebSocket to `path` on the API server with the kubeconfig's credentials, as
    `kubectl vm` opens it."""
    sslopt: dict[str, Any] = {"cert_reqs": ssl.CERT_REQUIRED}
    if cfg.ssl_ca_cert:
        sslopt["ca_certs"] = cfg.ssl_ca_cert
    if cfg.cert_file:
        sslopt["certfile"] = cfg.cert_file
    if cfg.key_file:
        sslopt["keyfile"] = cfg.key_file
    headers = [
        f"{s['key']}: {s['value']}"
        for s in cfg.auth_settings().values()
        if s.get("in") == "header" and s.get("value")
    ]
    ws = websocket.WebSocket(sslopt=sslopt, skip_utf8_validation=True)
    ws.settimeout(c.CONSOLE_CONNECT_TIMEOUT)
    ws.connect(
        websocket_url(str(cfg.host), path), header=headers, subprotocols=[c.CONSOLE_SUBPROTOCOL]
    )
    ws.settimeout(None)
    return ws


def run_command(writer: Console, command: str, tag: str, timeout: float = 60) -> int:
    """Type `command` followed by an echo of a marker the shell computes (so the typed line's own
    echo does not match it); the index just after the marker's output."""
    start = writer.size()
    writer.type(f"{command}; echo {tag}-$((6*7))\n".encode())
    return writer.wait_for(f"{tag}-42".encode(), start=start, timeout=timeout)


def shell_ready(writer: Console) -> None:
    """The guest's shell answers (it may still be booting when the machine reports PoweredOn)."""

    def answered() -> bool:
        start = writer.size()
        writer.type(b"echo READY-$((6*7))\n")
        return writer.find(b"READY-42", start=start, timeout=3) is not None

    wait(answered, timeout=180, what="the guest's shell answering on its serial console")


def attaches(cfg: client.Configuration, ns: str, count: int) -> tuple[list[float], list[float]]:
    """Seconds from opening a viewer's WebSocket to its first byte, and to the upgrade (101)
    alone, `count` times."""
    took, upgrades = [], []
    for _ in range(count):
        session = Console(cfg, ns, viewer=True)
        took.append(session.wait_first() - session.opened)
        upgrades.append(session.upgraded - session.opened)
        session.close()
    return took, upgrades


def plugin_attaches(lab: LabInfo, ns: str, count: int) -> list[float]:
    """Seconds from starting `kubectl vm console --viewer` to the first byte on its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    took = []
    for _ in range(count):
        started = time.monotonic()
        proc = subprocess.Popen(
            plugin_command(lab.kubeconfig, "console", GUEST, "-n", ns, "--viewer"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=REPO,
        )
        try:
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            first = os.read(proc.stdout.fileno(), 1) if ready else b""
            if not first:
                proc.kill()
                err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
                raise SystemExit(f"bench: kubectl vm console printed nothing: {err}")
            took.append(time.monotonic() - started)
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(30)
    return took


def round_trip(writer: Console, key: bytes) -> float:
    """Seconds from sending `key` to its echo."""
    start = writer.size()
    sent = time.monotonic()
    writer.type(key)
    writer.wait_for(key, start=start, timeout=30)
    return time.monotonic() - sent


def keystrokes(writer: Console, count: int) -> list[float]:
    """Round trips of single keystrokes to the shell's line editor's echo; lines of at most 40
    characters, each a comment the shell ignores."""
    took: list[float] = []
    letters = b"abcdefghijklmnopqrstuvwxyz"
    while len(took) < count:
        writer.type(b"#")
        for i in range(min(40, count - len(took))):
            took.append(round_trip(writer, letters[i % len(letters) : i % len(letters) + 1]))
        writer.type(b"\n")
        run_command(writer, ":", f"K{len(took)}")
    return took


def expected_output(size: int) -> tuple[int, bytes]:
    """The smallest N whose `seq 1 N` is at least `size` bytes on the serial line, and those
    bytes (the tty turns each LF into CR LF)."""
    lines, total, n = [], 0, 0
    while total < size:
        n += 1
        line = f"{n}\r\n".encode()
        lines.append(line)
        total += len(line)
    return n, b"".join(lines)


def viewers_see_everything(
    cfg: client.Configuration, ns: str, writer: Console, *, count: int, size: int, tag: str
) -> tuple[list[Console], bool]:
    """`count` viewers attached while the guest prints `size` bytes; whether each got them all.
    The viewers are returned still attached."""
    n, expected = expected_output(size)
    digest = hashlib.sha256(expected).hexdigest()
    sessions = [Console(cfg, ns, viewer=True) for _ in range(count)]
    for session in sessions:  # attached and past the replay before the output starts
        session.wait_first()
    begin, end = f"S{tag}-42\r\n".encode(), f"E{tag}-42".encode()
    started = time.monotonic()
    writer.type(f"echo S{tag}-$((6*7)); seq 1 {n}; echo E{tag}-$((6*7))\n".encode())
    timeout = 60 + size / (4 * KIB)  # the serial line at 4 KiB/s would be slow, not lost
    writer.wait_for(end, timeout=timeout)
    printed = time.monotonic() - started
    intact = True
    for index, session in enumerate([writer, *sessions]):
        out = session.output()
        at = session.wait_for(end, timeout=30)
        first = out.find(begin)
        got = out[first + len(begin) : at - len(end)] if first >= 0 else b""
        ok = got == expected
        intact = intact and ok
        who = "writer" if index == 0 else f"viewer {index:2d}"
        if not ok or index <= 1 or index == count:
            print(
                f"  {who}: {len(got)} of {len(expected)} bytes, sha256 "
                f"{hashlib.sha256(got).hexdigest()[:16]} "
                f"{'== expected' if ok else '!= expected ' + digest[:16]}"
                f"{'' if not session.closed_reason else ', closed: ' + session.closed_reason}",
                flush=True,
            )
    print(
        f"viewers: {count} viewers and the writer, {len(expected)} bytes of `seq 1 {n}` in "
        f"{printed:.1f} s ({len(expected) / printed / KIB:.0f} KiB/s on the serial line): "
        f"{'every session got every byte' if intact else 'BYTES LOST (see above)'}",
        flush=True,
    )
    return sessions, intact


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15)


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def idle_cpu(pid: int, seconds: float) -> float:
    """The share of one core the daemon used over `seconds` (a measurement window, not a
    wait for anything)."""
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)


def start_echo_server(api: client.ApiClient, writer: Console, ns: str) -> str:
    """busybox `nc` servers in the guest (an echo, zeros until the client leaves, a sink); the
    guest's address."""
    # A second nc (the line typed again) cannot bind the port and exits: one server stays.
    run_command(writer, f"(nc -ll -p {FORWARD_PORTS['echo']} -e cat &)", "NC")
    run_command(writer, f"(nc -ll -p {FORWARD_PORTS['download']} -e cat /dev/zero &)", "NZ")
    run_command(writer, f"(nc -ll -p {FORWARD_PORTS['upload']} -e sh -c 'cat >/dev/null' &)", "NS")
    return wait(
        lambda: guest_address(get(api, ns, GUEST, vm=False) or {}),
        timeout=120,
        what="the guest's address in its status",
    )


def direct_round(lab: LabInfo, address: str, size: int, mode: str) -> tuple[float, float]:
    """One round on a connection made inside the lab's namespace; its seconds and the CPU
    seconds of the process that made it."""
    port = str(FORWARD_PORTS[mode])
    probe = [sys.executable, "-m", "tests.support.port_echo", address, port, str(size), mode]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        ["ip", "netns", "exec", lab.netns, *probe],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=REPO,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return float(done.stdout.strip()), spent


def forwarded_round(port: int, size: int, mode: str) -> float | str:
    """One round through `kubectl vm port-forward`'s local port; its seconds, or how it broke."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            return ROUNDS[mode](sock, size)
        except (AssertionError, OSError) as err:
            return f"broken ({err})"


def rate(mib: float, took: float | str) -> str:
    return f"{mib / took:.1f} MiB/s" if isinstance(took, float) else f"STREAM {took}"


def guest_qemu_pid(ns: str) -> int:
    """The pid of the qemu running the bench's guest (its domain's name holds the namespace)."""
    found = subprocess.run(
        ["pgrep", "-f", f"qemu-system.*{ns}"], capture_output=True, text=True, check=False
    ).stdout.split()
    if not found:
        raise RuntimeError(f"no qemu process runs a domain of {ns}")
    return int(found[0])


def port_forward(
    lab: LabInfo, ns: str, address: str, daemon_pid: int, *, size: int, rounds: int
) -> bool:
    """The median ratio forwarded / direct throughput of each kind of round (`FORWARD_PORTS`)
    over `rounds` rounds, each kind through `kubectl vm port-forward` then direct; each line
    also gives the CPU seconds every process on the way spent, which tell where the time
    goes. False if a stream broke or its bytes differed."""
    forwards = {
        mode: PortForward(lab.kubeconfig, ns, GUEST, f":{port}")
        for mode, port in FORWARD_PORTS.items()
    }
    api_pid = int(json.loads((Path(lab.dir) / "state.json").read_text())["apiserver_pid"])
    qemu_pid = guest_qemu_pid(ns)
    mib = size / MIB
    ratios: dict[str, list[float]] = {mode: [] for mode in FORWARD_PORTS}
    try:
        for index in range(rounds):
            for mode, forward in forwards.items():
                workers = {
                    "plugin": forward.process.pid,
                    "API server": api_pid,
                    "daemon": daemon_pid,
                    "guest's qemu": qemu_pid,
                }
                spent = {who: cpu_seconds(pid) for who, pid in workers.items()}
                mine = time.process_time()
                through = forwarded_round(forward.local, size, mode)
                costs = {who: cpu_seconds(pid) - spent[who] for who, pid in workers.items()}
                costs["client"] = time.process_time() - mine
                qemu = cpu_seconds(qemu_pid)
                direct, client_cpu = direct_round(lab, address, size, mode)
                qemu = cpu_seconds(qemu_pid) - qemu
                if isinstance(through, float):
                    ratios[mode].append(direct / through)
                print(
                    f"port-forward {mode} round {index + 1}, {mib:g} MiB: through kubectl vm "
                    f"port-forward {rate(mib, through)} (CPU s: "
                    + ", ".join(f"{who} {cpu:.2f}" for who, cpu in costs.items())
                    + f"), direct in the lab's namespace {rate(mib, direct)} (CPU s: guest's "
                    f"qemu {qemu:.2f}, client {client_cpu:.2f})"
                    + (f"; ratio {ratios[mode][-1]:.2f}" if isinstance(through, float) else ""),
                    flush=True,
                )
        medians = ", ".join(
            f"{mode} {statistics.median(found) if found else float('nan'):.2f}"
            for mode, found in ratios.items()
        )
        print(f"port-forward / direct throughput, median ratios: {medians} (goal: at least 0.5)")
        return all(len(found) == rounds for found in ratios.values())
    finally:
        for forward in forwards.values():
            forward.stop()


def paste(lab: LabInfo, ns: str, pid: int, size: int) -> bool:
    """`size` random bytes written into `kubectl vm console`'s stdin as fast as it takes them (a
    user's paste), the guest's serial shell reading them raw (`stty raw -echo`: no echo, no
    line discipline) into `md5sum`; whether the guest's md5 is the sent data's. The daemon's
    and the lab's libvirtd's RSS are sampled throughout: neither may hold the paste (flow control
    holds the plugin back, and the plugin holds back its stdin)."""
    payload = os.urandom(size)
    digest = hashlib.md5(payload).hexdigest()
    libvirtd = int((Path(lab.dir) / "libvirt" / "libvirtd.pid").read_text())
    plugin = Plugin(Path(lab.kubeconfig), ns, GUEST)
    try:
        ready = f"R{uuid.uuid4().hex[:6]}"
        wait(lambda: shell_answers(plugin, ready), timeout=60,
             interval=1.0, what="the shell answering through the plugin")  # fmt: skip
        tag = read_raw(plugin, size)
        before = {who: rss_kib(p) for who, p in (("daemon", pid), ("libvirtd", libvirtd))}
        samplers = {
            "daemon": PeakSampler(lambda: rss_kib(pid)),
            "libvirtd": PeakSampler(lambda: rss_kib(libvirtd)),
        }
        began = time.monotonic()
        for at in range(0, size, 64 * KIB):
            plugin.send(payload[at : at + 64 * KIB])
        written = time.monotonic() - began
        # A line at 2 KiB/s would be slow, not broken.
        got = raw_md5(plugin, tag, timeout=120 + size / (2 * KIB))
        took = time.monotonic() - began
        peak = {who: sampler.stop() for who, sampler in samplers.items()}
        after = {who: rss_kib(p) for who, p in (("daemon", pid), ("libvirtd", libvirtd))}
    finally:
        plugin.leave()
    intact = got == digest
    print(
        f"paste: {size} bytes ({size / MIB:g} MiB) into kubectl vm console's stdin, the guest's "
        f"`head -c {size} | md5sum` {got[:16]} {'==' if intact else '!='} sent {digest[:16]} "
        f"({'nothing lost' if intact else 'BYTES LOST OR CHANGED'}); {took:.1f} s, "
        f"{size / took / KIB:.1f} KiB/s (the plugin took the last byte after {written:.1f} s)",
        flush=True,
    )
    for who in ("daemon", "libvirtd"):
        print(
            f"  {who} RSS: {before[who] / KIB:.1f} MiB before, {peak[who] / KIB:.1f} MiB at its "
            f"peak during the paste (sampled every 0.1 s), {after[who] / KIB:.1f} MiB after "
            f"(peak - before: {(peak[who] - before[who]) / KIB:.1f} MiB)",
            flush=True,
        )
    return intact


def hop_latency(lab: LabInfo, api: client.ApiClient, count: int) -> None:
    """Keystroke round trips to a guest on daemon A's own host (direct) and to one on daemon B's
    host (A forwards each session to B over the hop), through the API server to A, in alternate
    blocks of 20 in one run; both figures and their ratio. The set-up is test_hop.py's
    (tests/support/hop.py)."""
    workdir = Path(tempfile.mkdtemp(prefix="console-bench-hop-"))
    (workdir / "pki").mkdir()
    pki = hop_pki(lab, workdir / "pki")
    cfg = client.Configuration()
    config.load_kube_config(config_file=lab.kubeconfig, client_configuration=cfg)
    with hop_daemons(lab, api, pki, workdir, log_prefix="bench-hop") as hops, namespace(api) as ns:
        routes = {"direct": ("near", hops.a.host.name), "hop": ("far", hops.b.host.name)}
        for name, host in routes.values():
            vm, lm = pair(ns, name)
            lm["metadata"]["labels"][c.HOST_LABEL] = host
            lm["spec"]["host"] = host
            create(api, [vm, lm])
        for name, host in routes.values():
            wait(
                lambda name=name: (
                    ((get(api, ns, name, vm=False) or {}).get("status") or {}).get("powerState")
                    == "PoweredOn"
                ),
                timeout=180,
                what=f"LibvirtMachine {ns}/{name} PoweredOn on {host}",
            )
        writers = {route: Console(cfg, ns, viewer=False, name=name)
                   for route, (name, _) in routes.items()}  # fmt: skip
        try:
            for writer in writers.values():
                shell_ready(writer)
            took: dict[str, list[float]] = {route: [] for route in routes}
            while len(took["hop"]) < count:
                for route, writer in writers.items():
                    took[route] += keystrokes(writer, min(20, count - len(took[route])))
        finally:
            for writer in writers.values():
                writer.close()
    for route, (_, host) in routes.items():
        via = "API server, daemon A" + (", the hop, daemon B" if route == "hop" else "")
        print(f"keystroke round trip, {route} ({via}; host {host}): {ms(took[route])}")
    p50 = {route: statistics.median(values) for route, values in took.items()}
    print(
        f"the hop's cost: p50 x{p50['hop'] / p50['direct']:.2f} "
        f"(+{(p50['hop'] - p50['direct']) * 1e3:.1f} ms), "
        f"p95 x{p95(took['hop']) / p95(took['direct']):.2f}",
        flush=True,
    )


def measure(
    lab: LabInfo, api: client.ApiClient, daemon: tuple[int, int], ns: str, args: argparse.Namespace
) -> int:
    pid, _console_port = daemon
    cfg = client.Configuration()
    config.load_kube_config(config_file=lab.kubeconfig, client_configuration=cfg)
    create(api, pair(ns, GUEST))
    booted = time.monotonic()
    wait(
        lambda: (
            ((get(api, ns, GUEST, vm=False) or {}).get("status") or {}).get("powerState")
            == "PoweredOn"
        ),
        timeout=180,
        what=f"LibvirtMachine {ns}/{GUEST} PoweredOn",
    )
    writer = Console(cfg, ns, viewer=False)
    shell_ready(writer)
    print(f"guest {ns}/{GUEST} booted, its shell answering, in {time.monotonic() - booted:.0f} s")
    writer.close()
    if args.paste_only:
        return 0 if paste(lab, ns, pid, int(args.paste_mib * MIB)) else 1
    if args.forward_only:
        writer = Console(cfg, ns, viewer=False)
        writer.wait_first()
        address = start_echo_server(api, writer, ns)
        writer.close()
        forwarded = port_forward(
            lab, ns, address, pid, size=int(args.forward_mib * MIB), rounds=args.forward_rounds
        )
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        return 0 if forwarded else 1

    cold, upgrades = attaches(cfg, ns, args.attaches)
    print(f"attach, nobody attached (stream opened, replay from the host's log): {ms(cold)}")
    print(f"  of which the WebSocket's upgrade (101 Switching Protocols): {ms(upgrades)}")
    writer = Console(cfg, ns, viewer=False)
    writer.wait_first()
    warm, upgrades = attaches(cfg, ns, args.attaches)
    print(f"attach beside a writer (joins the open stream, replay from its ring): {ms(warm)}")
    print(f"  of which the WebSocket's upgrade (101 Switching Protocols): {ms(upgrades)}")
    plugin = plugin_attaches(lab, ns, args.plugin_attaches)
    print(f"attach with the plugin (process start to first byte on stdout): {ms(plugin)}")

    typed = keystrokes(writer, args.keystrokes)
    print(f"keystroke round trip (writer to the shell's echo and back): {ms(typed)} "
          f"(goal: p95 under 50 ms)")  # fmt: skip

    tag = uuid.uuid4().hex[:6]
    baseline = idle_cpu(pid, args.idle_seconds)
    sessions, intact = viewers_see_everything(
        cfg, ns, writer, count=args.viewers, size=args.output_kib * KIB, tag=tag
    )
    loaded = idle_cpu(pid, args.idle_seconds)
    print(
        f"daemon CPU over {args.idle_seconds:g} s: {baseline * 100:.1f} % of a core with the "
        f"writer alone, {loaded * 100:.1f} % with the writer and {len(sessions)} idle viewers "
        f"({threads(pid)} threads)"
    )
    for session in sessions:
        session.close()

    address = start_echo_server(api, writer, ns)
    writer.close()
    forwarded = port_forward(
        lab, ns, address, pid, size=int(args.forward_mib * MIB), rounds=args.forward_rounds
    )
    pasted = paste(lab, ns, pid, int(args.paste_mib * MIB))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0 if intact and pasted and forwarded else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attaches", type=int, default=20)
    parser.add_argument("--plugin-attaches", type=int, default=5)
    parser.add_argument("--keystrokes", type=int, default=200)
    parser.add_argument("--viewers", type=int, default=20)
    parser.add_argument("--output-kib", type=int, default=1024)
    parser.add_argument("--idle-seconds", type=float, default=15)
    parser.add_argument("--forward-mib", type=float, default=256)
    parser.add_argument("--forward-rounds", type=int, default=5)
    parser.add_argument("--hop-keystrokes", type=int, default=200)
    parser.add_argument("--hop-only", action="store_true", help="only the hop's figure")
    parser.add_argument("--paste-mib", type=float, default=10)
    parser.add_argument("--paste-only", action="store_true", help="boot the guest, paste, stop")
    parser.add_argument("--smoke", action="store_true", help="a tiny run; bytes still checked")
    parser.add_argument(
        "--forward-only", action="store_true", help="boot the guest, port-forward's rounds, stop"
    )
    args = parser.parse_args()
    if args.smoke:
        args.attaches, args.plugin_attaches, args.keystrokes = 2, 1, 10
        args.viewers, args.output_kib, args.idle_seconds = 2, 16, 2
        args.forward_mib, args.forward_rounds = 0.25, 1
        args.paste_mib, args.hop_keystrokes = 1 / 16, 10
    lab = read_lab()
    api = config.new_client_from_config(config_file=lab.kubeconfig)
    if args.hop_only:
        try:
            hop_latency(lab, api, args.hop_keystrokes)
        finally:
            api.close()
        return 0
    proc, log, port = start_console_daemon(
        lab, api, Path(tempfile.mkdtemp(prefix="console-bench-")), log_name="bench-console.log"
    )
    try:
        register_apiservice(lab, api, port)
        with namespace(api) as ns:
            return measure(lab, api, (proc.pid, port), ns, args)
    finally:
        unregister_apiservice(api)
        stop_daemon(proc, log)
        if args.hop_keystrokes and not (args.forward_only or args.paste_only):
            # Its own daemons (A and B on the lab's extra hosts), once this one has stopped.
            hop_latency(lab, api, args.hop_keystrokes)
        api.close()


if __name__ == "__main__":
    sys.exit(main())
