"""Benchmark: boot-disk overlay creation by base size, and image import throughput.

Prints, in one run against the lab's libvirtd:
- boot-disk creation: `LibvirtHypervisor.create_overlay` of a qcow2 overlay (backing format
  stated, grown to --overlay-gib) on a 1 GiB and on a 4 GiB qcow2 base, --repeats times each
  (interleaved, one uncounted warm-up each): median and max in ms, and the ratio 4 GiB / 1 GiB.
  Target: under 100 ms whatever the base's size, and about equal.
- import throughput: `ImageImporter` fetching the 1 GiB base over HTTP from a server this script
  runs on 127.0.0.1 (ephemeral port, Content-Length sent, sendfile), sha256 checked, written into
  the lab's pool by the adapter's `upload_stream` (straight into the pool's folder, flushed to
  disk, when libvirtd shares it, as in the lab; else through libvirt's upload stream), marker
  volume included. Beside it, two baselines of a plain download of the same file from the same
  server into a file on the pool's filesystem (same read size): without a sync (the page cache's
  speed) and with an fsync at the end (the same durability the import gives). Also, as a
  diagnostic, `upload_stream` alone fed by file reads (no HTTP, no hashing).
  Median and best MB/s (10^6 bytes/s) of --import-repeats runs each, in alternating order, and
  the ratio import / plain for both baselines (the best runs are the steadier figure on a busy
  machine: the plain download into the page cache varies several-fold with other load). Target:
  at least 0.80.

The bases hold real data (pseudo-random, with some text and some zero blocks, converted to qcow2
by qemu-img), generated once into ~/.cache/vm-api-lab/bench/ and reused. Every volume this script
makes in the pool is named `bench-<run id>-...` and deleted at the end. Bounded: deadlines on every
wait. Traffic goes only to 127.0.0.1 and the lab's libvirtd. Needs the lab: `make lab-up` first.

usage: .venv/bin/python bench/image_bench.py [--repeats 10] [--import-repeats 4] [--overlay-gib 20]
                                             [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.server
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from catalog.image import ImageFormat  # noqa: E402
from libvirt_provider.driver.base import OverlaySpec  # noqa: E402
from libvirt_provider.driver.libvirt_driver import LibvirtHypervisor  # noqa: E402
from libvirt_provider.errors import NotFoundError, RetryableError  # noqa: E402
from libvirt_provider.images import importer as images  # noqa: E402
from libvirt_provider.images.importer import ImageImporter  # noqa: E402
from libvirt_provider.images.names import marker_name  # noqa: E402
from libvirt_provider.resolved import BaseImage  # noqa: E402
from tests.support.waiting import TimedOutError, eventually  # noqa: E402

CACHE = Path.home() / ".cache" / "vm-api-lab" / "bench"
BASE_VERSION = "v1"  # bump when the generated content changes
MIB = 1024 * 1024
GIB = 1024 * MIB
IMPORT_DEADLINE = 600.0


def lab_env() -> dict[str, str]:
    """The lab's `export NAME=value` lines (as tests/e2e/conftest.py reads them)."""
    out = subprocess.run(
        [sys.executable, str(REPO / "tests" / "lab" / "lab.py"), "env"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    env: dict[str, str] = {}
    for line in out.splitlines():
        if line.startswith("export "):
            name, _, value = line[len("export ") :].partition("=")
            env[name] = shlex.split(value)[0] if value else ""
    return env


# -- base images ------------------------------------------------------------------------------


def _block(i: int) -> bytes:
    """1 MiB of mixed data: mostly pseudo-random, every 16th block zeros, every 8th text."""
    if i % 16 == 15:
        return bytes(MIB)
    if i % 8 == 3:
        line = f"block {i:08d} of a benchmark base image, text that compresses well\n".encode()
        return (line * (MIB // len(line) + 1))[:MIB]
    return os.urandom(MIB)


def qemu_img_info(path: Path) -> dict[str, object]:
    out = subprocess.run(
        ["qemu-img", "info", "--output=json", "-U", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    info: dict[str, object] = json.loads(out)
    return info


def ensure_base(directory: Path, mib: int) -> Path:
    """A qcow2 image of `mib` MiB virtual size holding real data, generated once into
    `directory` and reused."""
    path = directory / (
        f"base-{mib // 1024}g-{BASE_VERSION}.qcow2"
        if mib % 1024 == 0
        else f"base-{mib}m-{BASE_VERSION}.qcow2"
    )
    if path.exists() and qemu_img_info(path).get("virtual-size") == mib * MIB:
        return path
    directory.mkdir(parents=True, exist_ok=True)
    print(f"generating {path} (once; reused by later runs) ...", flush=True)
    raw = path.with_suffix(".raw.tmp")
    tmp = path.with_suffix(".qcow2.tmp")
    try:
        with raw.open("wb") as f:
            for i in range(mib):
                f.write(_block(i))
        subprocess.run(
            ["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(tmp)], check=True
        )
        tmp.rename(path)
    finally:
        raw.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    path.with_name(path.name + ".sha256").unlink(missing_ok=True)
    return path


def sha256_of(path: Path) -> str:
    """The file's digest, cached beside it; reading the file also warms the page cache."""
    sidecar = path.with_name(path.name + ".sha256")
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 * MIB):
            digest.update(chunk)
    if sidecar.exists() and sidecar.read_text().strip() != digest.hexdigest():
        raise SystemExit(f"bench: {path} does not match {sidecar}; delete both to regenerate")
    sidecar.write_text(digest.hexdigest() + "\n")
    return digest.hexdigest()


# -- HTTP server ------------------------------------------------------------------------------


@contextlib.contextmanager
def serve(path: Path) -> Iterator[str]:
    """Serve `path` (only it) on 127.0.0.1 on an ephemeral port; yields its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/" + path.name:
                self.send_error(404)
                return
            with path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(size))
                self.end_headers()
                self.wfile.flush()
                self.connection.sendfile(f)  # in the kernel, without the GIL

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="bench-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{path.name}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# -- measurements -----------------------------------------------------------------------------


def overlay_times(
    hv: LibvirtHypervisor, pool: str, run: str, bases: dict[str, Path], *, repeats: int, gib: int
) -> dict[str, list[float]]:
    """Seconds per create_overlay, per base size; each overlay is deleted before the next."""
    times: dict[str, list[float]] = {size: [] for size in bases}
    for i in range(-1, repeats):  # -1: warm-up, not counted
        for size, base in bases.items():
            name = f"bench-{run}-overlay-{size.replace(' ', '')}-{i + 1}.qcow2"
            spec = OverlaySpec(
                pool=pool,
                name=name,
                backing_path=str(base),
                backing_format=ImageFormat.QCOW2.value,
                capacity_bytes=gib * GIB,
            )
            try:
                t0 = time.perf_counter()
                info = hv.create_overlay(spec)
                elapsed = time.perf_counter() - t0
            finally:
                with contextlib.suppress(NotFoundError):
                    hv.delete_volume(pool, name)
            if info.backing_path != str(base) or info.capacity_bytes != gib * GIB:
                raise SystemExit(f"bench: unexpected overlay {info}")
            if i >= 0:
                times[size].append(elapsed)
    return times


def plain_download(url: str, directory: Path, *, sync: bool) -> tuple[float, int]:
    """Seconds and bytes for GET -> file, read CHUNK at a time; `sync`: fsync before the clock
    stops, as the import does before it calls a base verified."""
    with tempfile.NamedTemporaryFile(dir=directory, prefix="bench-plain-") as out:
        t0 = time.perf_counter()
        done = 0
        with urllib.request.urlopen(url, timeout=30) as response:
            while chunk := response.read(images.CHUNK):
                out.write(chunk)
                done += len(chunk)
        out.flush()
        if sync:
            os.fsync(out.fileno())
        return time.perf_counter() - t0, done


def stream_only(hv: LibvirtHypervisor, pool: str, name: str, source: Path) -> float:
    """Seconds for the adapter's upload_stream fed by file reads: no HTTP, no hashing."""

    def chunks() -> Iterator[bytes]:
        with source.open("rb") as f:
            while chunk := f.read(images.CHUNK):
                yield chunk

    t0 = time.perf_counter()
    try:
        hv.upload_stream(pool=pool, name=name, size=source.stat().st_size, chunks=chunks())
        return time.perf_counter() - t0
    finally:
        with contextlib.suppress(NotFoundError):
            hv.delete_volume(pool, name)


def imported(hv: LibvirtHypervisor, base: BaseImage) -> float:
    """Seconds from the first ensure() to the base being ready (marker volume written)."""
    changed = threading.Event()
    importer = ImageImporter(hv, on_change=lambda _base: changed.set())
    t0 = time.perf_counter()
    took = 0.0

    def ready() -> bool:
        nonlocal took
        changed.clear()
        state = importer.ensure(base)
        if state.ready:
            took = time.perf_counter() - t0
            return True
        if state.failed:
            raise SystemExit(f"bench: import failed: {state.message}")
        return False

    try:
        # A change to the import wakes the wait at once; a second at most between looks.
        eventually(
            ready,
            timeout=IMPORT_DEADLINE,
            interval=1.0,
            pause=changed.wait,
            what="import",
            not_yet=(),
        )
    except TimedOutError:
        raise SystemExit(f"bench: import not done within {IMPORT_DEADLINE:.0f} s") from None
    return took


def delete_import(hv: LibvirtHypervisor, pool: str, volume: str) -> None:
    for name in (volume, marker_name(volume)):
        with contextlib.suppress(NotFoundError):
            hv.delete_volume(pool, name)


def clean_up(hv: LibvirtHypervisor, pool: str, run: str) -> None:
    """Delete every volume of this run, waiting out a libvirtd restart (up to 60 s)."""

    def deleted() -> bool:
        for volume in hv.list_volumes(pool):
            if volume.name.startswith(f"bench-{run}-"):
                with contextlib.suppress(NotFoundError):
                    hv.delete_volume(pool, volume.name)
        return True

    try:
        # A RetryableError means libvirtd is restarting: the next attempt reconnects.
        eventually(
            deleted,
            timeout=60,
            interval=1,
            what=f"volumes bench-{run}-* deleted",
            not_yet=(RetryableError,),
        )
    except TimedOutError as timed_out:
        err = timed_out.last_error
        print(f"bench: could not clean up volumes bench-{run}-*: {err}", file=sys.stderr)


def mb_s(seconds: float, size: int) -> float:
    return size / seconds / 1e6


def import_runs(
    hv: LibvirtHypervisor, pool: str, run: str, source: Path, *, repeats: int
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Seconds per plain download (unsynced, synced), per import and per bare upload_stream, in
    alternating order."""
    size = source.stat().st_size
    sha = sha256_of(source)  # also warms the page cache for the first run
    # Plain copies go beside the source, on the pool's filesystem but not in the pool (a pool
    # refresh would adopt them as volumes).
    scratch = source.parent
    volume = f"bench-{run}-import.qcow2"
    plain: list[float] = []
    plain_synced: list[float] = []
    imports: list[float] = []
    streams: list[float] = []
    with serve(source) as url:
        base = BaseImage(
            image="bench-import",
            pool=pool,
            volume=volume,
            format=ImageFormat.QCOW2,
            url=url,
            sha256=sha,
        )

        def plain_once() -> None:
            seconds, got = plain_download(url, scratch, sync=False)
            if got != size:
                raise SystemExit(f"bench: plain download got {got} of {size} bytes")
            plain.append(seconds)

        def plain_synced_once() -> None:
            seconds, got = plain_download(url, scratch, sync=True)
            if got != size:
                raise SystemExit(f"bench: plain download got {got} of {size} bytes")
            plain_synced.append(seconds)

        def import_once() -> None:
            imports.append(imported(hv, base))
            delete_import(hv, pool, volume)

        def stream_once() -> None:
            streams.append(stream_only(hv, pool, f"bench-{run}-stream.raw", source))

        steps = [plain_once, plain_synced_once, import_once, stream_once]
        for i in range(repeats):
            # Alternate the order, so neither side always follows the other's writeback.
            for step in steps if i % 2 == 0 else reversed(steps):
                step()
    return plain, plain_synced, imports, streams


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="overlays per base size")
    parser.add_argument("--import-repeats", type=int, default=4, help="imports, plain copies")
    parser.add_argument("--overlay-gib", type=int, default=20, help="size the overlay grows to")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="16 and 64 MiB bases in the lab's folder (not the shared cache), one run each",
    )
    args = parser.parse_args()
    env = lab_env()
    pool = env["VMAPI_LAB_POOL"]
    pool_dir = Path(env["VMAPI_LAB_DIR"]) / "pool"
    run = uuid.uuid4().hex[:8]

    directory, sizes = CACHE, {"1 GiB": 1024, "4 GiB": 4096}
    if args.smoke:
        args.repeats, args.import_repeats, args.overlay_gib = 1, 1, 1
        directory = Path(env["VMAPI_LAB_DIR"]) / "bench-smoke"
        sizes = {"16 MiB": 16, "64 MiB": 64}
    bases = {label: ensure_base(directory, mib) for label, mib in sizes.items()}
    small, large = list(bases)
    size = bases[small].stat().st_size
    if directory.stat().st_dev != pool_dir.stat().st_dev:
        raise SystemExit(f"bench: {directory} is not on the pool's filesystem ({pool_dir})")

    hv = LibvirtHypervisor(env["LIBVIRT_DEFAULT_URI"])
    try:
        overlays = overlay_times(hv, pool, run, bases, repeats=args.repeats, gib=args.overlay_gib)
        plain, plain_synced, imports, streams = import_runs(
            hv, pool, run, bases[small], repeats=args.import_repeats
        )
    finally:
        clean_up(hv, pool, run)
        hv.close()

    print(f"run {run}, pool {pool}, libvirt {env['LIBVIRT_DEFAULT_URI']}")
    print(
        f"boot-disk overlay: create_overlay, qcow2 over qcow2 (backing format stated), grown to "
        f"{args.overlay_gib} GiB, {args.repeats} runs per base, interleaved"
    )
    print(f"  {'base':<8} {'file size':>10} {'median':>10} {'max':>10}")
    for label, times in overlays.items():
        print(
            f"  {label:<8} {bases[label].stat().st_size / GIB:>6.2f} GiB "
            f"{1000 * statistics.median(times):>7.1f} ms {1000 * max(times):>7.1f} ms"
        )
    ratio = statistics.median(overlays[large]) / statistics.median(overlays[small])
    print(f"  ratio {large} / {small} (medians): {ratio:.2f}   target: < 100 ms at any size, ~1.0")

    def figures(runs: list[float]) -> str:
        rates = [mb_s(seconds, size) for seconds in runs]
        each = ", ".join(f"{rate:.0f}" for rate in rates)
        return f"{statistics.median(rates):7.1f} {max(rates):7.1f}  ({each})"

    def ratio_of(pick: Callable[[list[float]], float], baseline: list[float]) -> float:
        return pick([mb_s(s, size) for s in imports]) / pick([mb_s(s, size) for s in baseline])

    print(
        f"image import: {size / 1e6:.0f} MB qcow2 over HTTP from 127.0.0.1, "
        f"{images.CHUNK // 1024} KiB reads, {args.import_repeats} runs each in alternating order"
    )
    print(f"  {'MB/s':<54} {'median':>7} {'best':>7}  (each run)")
    print(f"  plain download, GET -> file beside the pool, no sync   {figures(plain)}")
    print(f"  plain download, GET -> file beside the pool, fsync     {figures(plain_synced)}")
    print(f"  ImageImporter: sha256, upload_stream, fsync, refresh   {figures(imports)}")
    print(f"  (diagnostic) upload_stream alone, file reads, no hash  {figures(streams)}")
    for label, baseline in (("no sync", plain), ("fsync", plain_synced)):
        print(
            f"  ratio import / plain ({label}): medians "
            f"{ratio_of(statistics.median, baseline):.2f}, best runs {ratio_of(max, baseline):.2f}"
            "   target: >= 0.80"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
