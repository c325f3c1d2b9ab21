"""Importing catalog images into a host's pool: one download per content checksum, verified.

A `LibvirtImage` with an http(s) source resolves to a base volume named after its sha256
(`image-<sha256>.<format>`), so every machine on the host that uses the same bytes shares one cached
base. `ImageImporter.ensure()` answers whether that base is ready; if not, it starts (at most) one
background download for it and reports progress on every later call:

- the bytes are streamed from the server straight into a pool volume through libvirt (never held
  in memory whole), and hashed on the way;
- nothing is written when the announced size is over the image's cap (`maxSizeGiB`) or the
  pool's free space, and a server sending more than it announced is cut off;
- a qcow2 whose header names a backing file or an external data file is stopped as soon as its
  header has arrived (`qcow2.py`), and libvirt's own view of the finished volume is checked again;
- a mismatching checksum, a short read or any error deletes the half-written volume, and the
  failure is reported (and retried only after `retry_after`);
- a verified base is marked by a small companion volume `<base>.verified` holding the digest. A base
  volume without its marker (a daemon killed mid-download) is never used: it is deleted and
  downloaded again.

Only one thread per base downloads; machines waiting for it are requeued by the reconciler.
`on_change` is called when an import starts, at each progress tick and when it ends; the image
cache (`image_cache.py`) turns that into the LibvirtImage's per-host status.

The importer is also the garbage collector's partner: it knows which bases it is writing or has just
handed to a machine, and `claim_for_collection` lets the collector take a base only when neither is
the case, atomically with respect to `ensure()`.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from email.message import Message
from typing import Any, Final, Protocol
from urllib.parse import urlsplit

from prometheus_client import Counter, Histogram

from libvirt_provider.driver.base import PoolAccess
from libvirt_provider.errors import NotFoundError, ProviderError
from libvirt_provider.images.digest import BackgroundDigest
from libvirt_provider.images.names import marker_name, shown_url
from libvirt_provider.images.qcow2 import HEADER_BYTES, header_problem
from libvirt_provider.resolved import BaseImage

__all__ = ["ImageImporter", "ImportRecord", "ImportState"]

log = logging.getLogger(__name__)

CHUNK = 1024 * 1024
PROGRESS_SECONDS = 5.0
# An import that has not finished after this long is abandoned (its half-written volume removed)
# and retried later: a server that trickles bytes must not hold a pool's volume for ever.
IMPORT_DEADLINE = 3 * 3600.0

Key = tuple[str, str]  # (pool, base volume)


@dataclass(frozen=True)
class ImportState:
    ready: bool
    failed: bool = False
    bytes_done: int = 0
    bytes_total: int | None = None
    message: str = ""


@dataclass(frozen=True)
class ImportRecord:
    """The importer's last word on one base: running, failed, or done."""

    running: bool
    bytes_done: int
    bytes_total: int | None
    error: str | None


@dataclass
class _Job:
    done: int = 0
    total: int | None = None
    error: str | None = None
    finished_at: float | None = None
    running: bool = True


class Download(Protocol):
    """What the importer needs of an HTTP response (urllib's, or a test's)."""

    headers: Mapping[str, str] | Message

    def read(self, amt: int) -> bytes: ...
    def __enter__(self) -> Download: ...
    def __exit__(self, *exc: object) -> None: ...


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows at most a few redirects, and only to http(s): urllib would also follow one to
    ftp, which the image's URL did not ask for."""

    max_redirections = 5

    def redirect_request(  # noqa: PLR0917 - urllib calls it positionally
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        if urlsplit(newurl).scheme not in ("http", "https"):
            raise ProviderError(
                f"{shown_url(req.full_url)} redirects to {urlsplit(newurl).scheme!r}: "
                "only http and https are followed"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_HttpOnlyRedirects)


def _refuse_foreign_files(base: BaseImage, url: str, head: bytes) -> None:
    """Stop a qcow2 download whose header points at other host files (see images.qcow2)."""
    problem = header_problem(head)
    if problem is not None:
        raise ProviderError(
            f"image {base.image!r} from {url} is refused: {problem}; imported images must "
            "stand alone, so it was discarded"
        )


def _open_url(url: str) -> Download:
    response: Download = _OPENER.open(url, timeout=30)
    return response


IMPORTS: Final = Counter(
    "vmapi_libvirt_image_imports_total",
    "Image imports into a host's pool that ended, by result.",
    ["result"],
)
"""result: ok (sha256 verified), failed (any error: the half-written volume was removed)."""
# Both results exist from the start at 0: a series born at 1 has no earlier sample to rise from,
# so rate() and increase() would miss the first failed import after a start.
for _result in ("ok", "failed"):
    IMPORTS.labels(result=_result)

IMPORT_BYTES: Final = Counter(
    "vmapi_libvirt_image_import_bytes_total",
    "Bytes written into pools by image imports, failed ones included.",
)

IMPORT_SECONDS: Final = Histogram(
    "vmapi_libvirt_image_import_duration_seconds",
    "Time one image import took, from its start to its end, whatever the result.",
    ["result"],
    buckets=(1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0),
)


class ImageImporter:
    def __init__(
        self,
        hypervisor: PoolAccess,
        *,
        on_change: Callable[[BaseImage], None] = lambda _base: None,
        retry_after: float = 60.0,
        deadline: float = IMPORT_DEADLINE,
        opener: Callable[[str], Download] = _open_url,
    ) -> None:
        self._hv = hypervisor
        self._on_change = on_change
        self._retry_after = retry_after
        self._deadline = deadline
        self._open = opener
        self._lock = threading.Lock()
        self._jobs: dict[Key, _Job] = {}
        # When each base was last reported ready to a caller, who is about to layer on it.
        self._handed_out: dict[Key, float] = {}
        # Bases the garbage collector is deleting right now: not ready, not to be imported yet.
        self._collecting: set[Key] = set()

    def ensure(self, base: BaseImage) -> ImportState:
        """Ready, in progress or failed; starts the download when nothing is under way."""
        if base.url is None or base.sha256 is None:
            return ImportState(ready=self._hv.find_volume(base.pool, base.volume) is not None)
        key = (base.pool, base.volume)
        with self._lock:
            if key in self._collecting:
                return ImportState(False)  # gone in a moment; the next call imports it again
            job = self._jobs.get(key)
            if job is not None and job.running:
                return ImportState(False, bytes_done=job.done, bytes_total=job.total)
            if (
                job is not None
                and job.error is not None
                and job.finished_at is not None
                and time.monotonic() - job.finished_at < self._retry_after
            ):
                return ImportState(False, failed=True, message=job.error)
        if self.verified(base.pool, base.volume):
            with self._lock:
                # The collector may have claimed it between the lookup and here.
                if key in self._collecting:
                    return ImportState(False)
                self._handed_out[key] = time.monotonic()
            return ImportState(ready=True)
        with self._lock:
            job = self._jobs.get(key)
            if job is not None and job.running:
                return ImportState(False, bytes_done=job.done, bytes_total=job.total)
            if key in self._collecting:
                return ImportState(False)
            job = self._jobs[key] = _Job()
        threading.Thread(
            target=self._download, args=(base, job), name=f"import-{base.volume}", daemon=True
        ).start()
        return ImportState(False)

    def records(self) -> dict[Key, ImportRecord]:
        """What the importer knows of every base it has worked on since the daemon started."""
        with self._lock:
            return {
                key: ImportRecord(
                    running=job.running, bytes_done=job.done, bytes_total=job.total, error=job.error
                )
                for key, job in self._jobs.items()
            }

    def running(self, base: BaseImage) -> bool:
        with self._lock:
            job = self._jobs.get((base.pool, base.volume))
            return job is not None and job.running

    def busy(self, since: float) -> frozenset[Key]:
        """Bases being imported, or handed to a caller at or after `since` (monotonic)."""
        with self._lock:
            return self._busy_locked(since)

    def _busy_locked(self, since: float) -> frozenset[Key]:
        running = {key for key, job in self._jobs.items() if job.running}
        recent = {key for key, at in self._handed_out.items() if at >= since}
        return frozenset(running | recent)

    @contextlib.contextmanager
    def claim_for_collection(self, keys: Collection[Key], since: float) -> Iterator[set[Key]]:
        """The subset of `keys` the collector may delete now; `ensure()` waits on them meanwhile.

        A base being imported, or handed out at or after `since`, is kept: a caller that got it
        then may be making an overlay on it that the collector's listing of volumes did not see.
        """
        with self._lock:
            claimed = set(keys) - self._busy_locked(since) - self._collecting
            self._collecting |= claimed
        try:
            yield claimed
        finally:
            with self._lock:
                self._collecting -= claimed
                for key in claimed:
                    self._handed_out.pop(key, None)

    def verified(self, pool: str, volume: str) -> bool:
        """Whether `pool` holds the base `volume` with its marker: complete and checked."""
        return (
            self._hv.find_volume(pool, volume) is not None
            and self._hv.find_volume(pool, marker_name(volume)) is not None
        )

    def _download(self, base: BaseImage, job: _Job) -> None:
        assert base.url is not None
        assert base.sha256 is not None
        url = shown_url(base.url)
        started = time.monotonic()
        succeeded = False
        try:
            self._discard_unverified(base)
            actual = self._stream_into_pool(base, job, url)
            if actual != base.sha256:
                self._hv.delete_volume(base.pool, base.volume)
                raise ProviderError(
                    f"image {base.image!r} from {url}: sha256 {actual} does not "
                    f"match the expected {base.sha256}; the download was discarded"
                )
            self._refuse_backing_chain(base, url)
            self._hv.upload_volume(
                pool=base.pool, name=marker_name(base.volume), data=base.sha256.encode()
            )
            log.info(
                "imported image %s into %s/%s: %d of %d bytes, sha256 verified",
                base.image,
                base.pool,
                base.volume,
                job.done,
                job.total,
            )
            succeeded = True
        except (OSError, ProviderError, ValueError) as err:
            job.error = str(err) if isinstance(err, ProviderError) else f"{url}: {_no_url(err)}"
            log.warning("import of image %s failed: %s", base.image, job.error)
        finally:
            result = "ok" if succeeded else "failed"
            IMPORTS.labels(result=result).inc()
            IMPORT_BYTES.inc(job.done)
            IMPORT_SECONDS.labels(result=result).observe(time.monotonic() - started)
            job.finished_at = time.monotonic()
            job.running = False
            self._on_change(base)

    def _stream_into_pool(self, base: BaseImage, job: _Job, url: str) -> str:
        """Copy the image's bytes into its base volume; their sha256."""
        assert base.url is not None
        give_up_at = time.monotonic() + self._deadline
        digest = BackgroundDigest()
        with contextlib.closing(digest), self._open(base.url) as response:
            length = response.headers.get("Content-Length")
            if length is None:
                raise ProviderError(f"{url} sent no Content-Length; cannot stream it")
            job.total = int(length)
            self._check_room(base, url, job.total)
            log.info(
                "importing image %s from %s into %s/%s: %d bytes",
                base.image,
                url,
                base.pool,
                base.volume,
                job.total,
            )
            self._on_change(base)

            head = bytearray()

            def chunks() -> Iterator[bytes]:
                reported = time.monotonic()
                while chunk := response.read(CHUNK):
                    if time.monotonic() > give_up_at:
                        raise ProviderError(
                            f"{url}: not finished after {self._deadline:.0f} s "
                            f"({job.done} of {job.total} bytes); abandoned"
                        )
                    if job.total is not None and job.done + len(chunk) > job.total:
                        raise ProviderError(
                            f"{url} sent more than the {job.total} bytes it announced; abandoned"
                        )
                    if base.format == "qcow2" and len(head) < HEADER_BYTES:
                        head.extend(chunk[: HEADER_BYTES - len(head)])
                        if len(head) == HEADER_BYTES or job.done + len(chunk) == job.total:
                            _refuse_foreign_files(base, url, bytes(head))
                    digest.update(chunk)
                    job.done += len(chunk)
                    if time.monotonic() - reported > PROGRESS_SECONDS:
                        reported = time.monotonic()
                        log.info(
                            "importing image %s: %d of %d bytes", base.image, job.done, job.total
                        )
                        self._on_change(base)
                    yield chunk

            self._hv.upload_stream(
                pool=base.pool, name=base.volume, size=job.total, chunks=chunks()
            )
            return digest.hexdigest()

    def _check_room(self, base: BaseImage, url: str, size: int) -> None:
        """Refuse before writing anything: more than the image's cap, or than the pool has free
        (a full pool would pause every running machine whose disks grow in it)."""
        if base.max_bytes is not None and size > base.max_bytes:
            raise ProviderError(
                f"image {base.image!r} from {url} is {size} bytes, more than its cap of "
                f"{base.max_bytes} (spec.source.http.maxSizeGiB); nothing was downloaded"
            )
        free = self._hv.pool_available(base.pool)
        if free is not None and size > free:
            raise ProviderError(
                f"image {base.image!r} from {url} is {size} bytes; pool {base.pool!r} has "
                f"{free} bytes free; nothing was downloaded"
            )

    def _refuse_backing_chain(self, base: BaseImage, url: str) -> None:
        """An imported image must stand alone: a qcow2 whose header names a backing file would
        make qemu open that path on the host for every machine layered on it (libvirt reports
        the backing file it read from the header)."""
        volume = self._hv.find_volume(base.pool, base.volume)
        if volume is not None and volume.backing_path:
            self._hv.delete_volume(base.pool, base.volume)
            raise ProviderError(
                f"image {base.image!r} from {url} names a backing file; imported images must "
                "stand alone, so it was discarded"
            )

    def _discard_unverified(self, base: BaseImage) -> None:
        """A base without its marker, or a marker without its base, is the remains of an
        interrupted import or deletion; a stale marker would also block writing the new one."""
        for name in (marker_name(base.volume), base.volume):
            if self._hv.find_volume(base.pool, name) is not None:
                log.warning("discarding unverified image volume %s/%s", base.pool, name)
                with contextlib.suppress(NotFoundError):
                    self._hv.delete_volume(base.pool, name)


def _no_url(err: Exception) -> str:
    """An error's text without the URL some of urllib's errors repeat (query string included)."""
    if isinstance(err, urllib.error.HTTPError):
        return f"HTTP {err.code} {err.reason}"
    if isinstance(err, urllib.error.URLError):
        return f"{err.reason}"
    return str(err)
