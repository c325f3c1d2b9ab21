"""Benchmark: what connection attempts to a black-hole remote host leave behind in the process.

Usage: .venv/bin/python bench/connect_bench.py [--attempts 100] [--deadline 0.2] [--smoke]

A listener on 127.0.0.1 accepts TCP and never answers (`tests/support/black_hole.py`); libvirt's
real TLS client (`qemu+tls://127.0.0.1:<port>/system`, a client certificate made with openssl)
is pointed at it through the daemon's attempt path (`driver/connect_attempts.py`), one attempt
after the other, each given up after `--deadline` seconds. Prints the process's threads and open
file descriptors before the attempts, at their peak, right after the last, and once settled, with
the sockets the listener still holds. The daemon's own deadline is 15 s; a shorter one only makes
the run faster, the cut that ends an abandoned attempt does not depend on it.

Needs no lab: libvirt-python and the openssl command. Traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import libvirt

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from libvirt_provider.driver.connect_attempts import in_flight, open_with_deadline  # noqa: E402
from libvirt_provider.driver.endpoint import ConnectionProblemError  # noqa: E402
from tests.support.black_hole import BlackHole, process_figures, tls_client_pki  # noqa: E402
from tests.support.waiting import eventually  # noqa: E402


def _no_sweeper() -> bool:
    return not any(t.name == "libvirt-connect-sweeper" for t in threading.enumerate())


def _close(conn: libvirt.virConnect) -> None:
    conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=100)
    parser.add_argument("--deadline", type=float, default=0.2, help="seconds per attempt")
    parser.add_argument("--smoke", action="store_true", help="5 attempts: a quick check")
    args = parser.parse_args()
    attempts = 5 if args.smoke else args.attempts
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    with tempfile.TemporaryDirectory() as tmp, BlackHole() as hole:
        pki = tls_client_pki(Path(tmp) / "pki")
        if pki is None:
            print("connect_bench: needs the openssl command", file=sys.stderr)
            return 2
        uri = f"qemu+tls://127.0.0.1:{hole.port}/system?pkipath={pki}"

        def attempt() -> str:
            eventually(lambda: not in_flight(uri), timeout=60, interval=0.01, what="idle")
            try:
                open_with_deadline(uri, args.deadline, opener=libvirt.open, close=_close)
            except ConnectionProblemError as problem:
                return problem.reason
            except libvirt.libvirtError as err:
                return f"libvirt error: {err}"
            return "connected (unexpected)"

        attempt()  # libvirt's and GnuTLS's one-time set-up, outside the figures
        eventually(lambda: not in_flight(uri), timeout=60, what="the first attempt ended")
        eventually(lambda: hole.open_connections() == 0, timeout=60, what="its socket closed")
        eventually(_no_sweeper, timeout=60, what="the sweeper thread gone")
        before = process_figures()
        peak = before
        outcomes: dict[str, int] = {}
        started = time.monotonic()
        for _ in range(attempts):
            outcome = attempt()
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            peak = max(peak, process_figures())
        took = time.monotonic() - started
        right_after = process_figures()
        settled_at = time.monotonic()
        settled = eventually(
            lambda: (f := process_figures()) <= before and f,
            timeout=60,
            what="threads and descriptors back to where they were",
        )
        settle = time.monotonic() - settled_at
        print(f"attempts: {attempts}, deadline {args.deadline:g} s each, {took:.1f} s in all")
        print(f"outcomes: {outcomes}; connections the listener accepted: {hole.accepted - 1}")
        print(f"{'':>14} {'threads':>8} {'fds':>6}")
        for name, (threads, fds) in (
            ("before", before),
            ("peak", peak),
            ("right after", right_after),
            ("settled", settled),
        ):
            print(f"{name:>14} {threads:>8} {fds:>6}")
        print(f"settled {settle:.2f} s after the last attempt")
        print(f"sockets the listener still holds: {hole.open_connections()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
