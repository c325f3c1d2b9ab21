"""The image importer: one download per base, verified, nothing unverified ever used; its
import counter serves both results from the start."""

from __future__ import annotations

import hashlib
import http.client
import io
import threading
import urllib.request
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import REGISTRY

from libvirt_provider.errors import ProviderError
from libvirt_provider.images.importer import ImageImporter, _HttpOnlyRedirects
from libvirt_provider.images.names import marker_name, shown_url
from libvirt_provider.resolved import BaseImage
from tests.doubles.hypervisor import FakeHypervisor
from tests.support.waiting import eventually
from tests.unit.images.qcow2_bytes import qcow2_image

DATA = qcow2_image(size=11000)
SHA = hashlib.sha256(DATA).hexdigest()


class _Response(io.BytesIO):
    def __init__(self, data: bytes, *, length: bool = True, gate: threading.Event | None = None):
        super().__init__(data)
        self.headers: dict[str, str] = {"Content-Length": str(len(data))} if length else {}
        self._gate = gate

    def read(self, amt: int | None = -1) -> bytes:
        if self._gate is not None:
            self._gate.wait(5)
        return super().read(amt)


def _base(sha: str = SHA) -> BaseImage:
    return BaseImage(
        image="tiny",
        pool="default",
        volume=f"image-{sha[:32]}.qcow2",
        format="qcow2",
        url="http://127.0.0.1:1/tiny.qcow2",
        sha256=sha,
    )


def _importer(hv: FakeHypervisor, opened: list[str], **kw: Any) -> ImageImporter:
    def opener(url: str) -> _Response:
        opened.append(url)
        return _Response(DATA, **kw)

    return ImageImporter(hv, opener=opener, retry_after=3600)


def test_many_callers_one_download_then_ready() -> None:
    hv, opened = FakeHypervisor(), []
    gate = threading.Event()
    importer = _importer(hv, opened, gate=gate)
    states = [importer.ensure(_base()) for _ in range(5)]
    assert not any(s.ready for s in states)
    gate.set()
    eventually(lambda: importer.ensure(_base()).ready, timeout=10, what="import done")
    assert len(opened) == 1
    assert hv.uploads[("default", _base().volume)] == DATA
    assert hv.uploads[("default", marker_name(_base().volume))] == SHA.encode()


def test_a_wrong_checksum_fails_and_keeps_no_volume() -> None:
    hv, opened = FakeHypervisor(), []
    importer = _importer(hv, opened)
    base = _base("f" * 64)
    importer.ensure(base)
    state = eventually(
        lambda: (s := importer.ensure(base)).failed and s, timeout=10, what="failure reported"
    )
    assert "does not match" in state.message
    assert hv.volumes == {}
    importer.ensure(base)
    assert len(opened) == 1  # not retried before retry_after


def test_an_unverified_leftover_is_discarded_and_downloaded_again() -> None:
    hv, opened = FakeHypervisor(), []
    hv.add_volume("default", _base().volume)  # a daemon died mid-download: no marker
    importer = _importer(hv, opened)
    assert not importer.ensure(_base()).ready
    eventually(lambda: importer.ensure(_base()).ready, timeout=10, what="re-imported")
    assert hv.uploads[("default", _base().volume)] == DATA


def test_a_server_without_content_length_is_reported() -> None:
    hv, opened = FakeHypervisor(), []
    importer = _importer(hv, opened, length=False)
    importer.ensure(_base())
    state = eventually(
        lambda: (s := importer.ensure(_base())).failed and s, timeout=10, what="failure"
    )
    assert "Content-Length" in state.message
    assert hv.volumes == {}


def test_a_stale_marker_is_discarded_before_importing_again() -> None:
    hv, opened = FakeHypervisor(), []
    hv.add_volume("default", marker_name(_base().volume))  # a collection interrupted midway
    importer = _importer(hv, opened)
    assert not importer.ensure(_base()).ready
    eventually(lambda: importer.ensure(_base()).ready, timeout=10, what="re-imported")
    assert hv.uploads[("default", marker_name(_base().volume))] == SHA.encode()


def test_progress_is_announced_at_start_and_end() -> None:
    hv, changes = FakeHypervisor(), []
    importer = ImageImporter(
        hv,
        opener=lambda _url: _Response(DATA),
        on_change=lambda base: changes.append(importer.running(base)),
    )
    importer.ensure(_base())
    eventually(lambda: importer.ensure(_base()).ready, timeout=10, what="import done")
    assert changes[0] is True
    assert changes[-1] is False
    record = importer.records()[("default", _base().volume)]
    assert (record.running, record.bytes_done, record.bytes_total) == (False, len(DATA), len(DATA))


def test_a_running_import_cannot_be_claimed_for_collection() -> None:
    hv, opened = FakeHypervisor(), []
    gate = threading.Event()
    importer = _importer(hv, opened, gate=gate)
    importer.ensure(_base())
    key = ("default", _base().volume)
    assert key in importer.busy(since=0.0)
    with importer.claim_for_collection([key], since=0.0) as claimed:
        assert claimed == set()
    gate.set()
    eventually(lambda: importer.ensure(_base()).ready, timeout=10, what="import done")


def test_a_base_just_handed_out_is_spared_and_a_claimed_one_is_not_handed_out() -> None:
    hv, opened = FakeHypervisor(), []
    importer = _importer(hv, opened)
    importer.ensure(_base())
    eventually(lambda: importer.ensure(_base()).ready, timeout=10, what="import done")
    key = ("default", _base().volume)
    with importer.claim_for_collection([key], since=0.0) as claimed:
        assert claimed == set()  # handed out after `since`
    with importer.claim_for_collection([key], since=float("inf")) as claimed:
        assert claimed == {key}
        state = importer.ensure(_base())
        assert not state.ready
        assert not state.failed
    assert len(opened) == 1  # nothing was imported while the collector held it


def test_a_url_is_never_shown_with_its_credentials_or_query() -> None:
    url = "https://user:pw@images.example:8443/img/tiny.qcow2?X-Amz-Signature=s3cr3t#frag"
    assert shown_url(url) == "https://images.example:8443/img/tiny.qcow2?…"
    assert shown_url("http://h/a.qcow2") == "http://h/a.qcow2"


def test_a_failed_import_reports_no_query_string() -> None:
    hv, opened = FakeHypervisor(), []
    secret = "X-Amz-Signature=s3cr3t"
    base = _base(sha="00" * 32).model_copy(update={"url": f"http://127.0.0.1:1/t.qcow2?{secret}"})
    importer = _importer(hv, opened)
    eventually(lambda: importer.ensure(base).failed, timeout=10, what="import failed")
    message = importer.ensure(base).message
    assert "does not match" in message
    assert "s3cr3t" not in message


def test_an_import_past_its_deadline_is_abandoned_and_leaves_nothing() -> None:
    hv = FakeHypervisor()

    def opener(url: str) -> _Response:
        return _Response(DATA * 4)

    importer = ImageImporter(hv, opener=opener, retry_after=3600, deadline=0.0)
    eventually(lambda: importer.ensure(_base()).failed, timeout=10, what="import abandoned")
    assert "abandoned" in importer.ensure(_base()).message
    assert ("default", _base().volume) not in hv.uploads


def test_a_redirect_to_another_scheme_is_refused() -> None:
    handler = _HttpOnlyRedirects()
    request = urllib.request.Request("https://images.example/a.qcow2?token=t")
    with pytest.raises(ProviderError, match="only http and https") as caught:
        handler.redirect_request(
            request, None, 302, "Found", http.client.HTTPMessage(), "ftp://elsewhere/a"
        )
    assert "token" not in str(caught.value)


class _LibvirtSeesABackingFile(FakeHypervisor):
    """libvirt reads a backing file from the uploaded qcow2's header."""

    def upload_stream(self, *, pool: str, name: str, size: int, chunks: Any) -> Any:
        volume = super().upload_stream(pool=pool, name=name, size=size, chunks=chunks)
        self.volumes[(pool, name)] = replace(volume, backing_path="/etc/shadow")
        return self.volumes[(pool, name)]


def test_an_imported_image_with_a_backing_file_is_discarded() -> None:
    hv = _LibvirtSeesABackingFile()
    importer = ImageImporter(hv, opener=lambda url: _Response(DATA), retry_after=3600)
    eventually(lambda: importer.ensure(_base()).failed, timeout=10, what="import refused")
    assert "names a backing file" in importer.ensure(_base()).message
    assert ("default", _base().volume) not in hv.volumes
    assert ("default", marker_name(_base().volume)) not in hv.volumes


def _refused(hv: FakeHypervisor, data: bytes, base: BaseImage | None = None) -> str:
    base = base or _base(hashlib.sha256(data).hexdigest())
    importer = ImageImporter(hv, opener=lambda url: _Response(data), retry_after=3600)
    eventually(lambda: importer.ensure(base).failed, timeout=10, what="import refused")
    assert (base.pool, base.volume) not in hv.volumes
    assert (base.pool, marker_name(base.volume)) not in hv.volumes
    return importer.ensure(base).message


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        (qcow2_image(backing=True), "names a backing file"),
        (qcow2_image(data_file_extension=True), "names an external data file"),
        (b"<html>not found</html>" + b" " * 200, "not a qcow2 image"),
    ],
    ids=["backing-file", "data-file", "not-qcow2"],
)
def test_a_qcow2_naming_other_files_is_stopped_at_its_header(image: bytes, problem: str) -> None:
    assert problem in _refused(FakeHypervisor(), image)


def test_an_image_over_its_cap_is_refused_before_anything_is_written() -> None:
    hv = FakeHypervisor()
    base = _base().model_copy(update={"max_bytes": len(DATA) - 1})
    message = _refused(hv, DATA, base)
    assert "more than its cap" in message
    assert "maxSizeGiB" in message
    assert "upload_stream" not in hv.calls


def test_an_image_larger_than_the_pools_free_space_is_refused() -> None:
    hv = FakeHypervisor(pool_free={"default": len(DATA) - 1})
    assert "bytes free" in _refused(hv, DATA)
    assert "upload_stream" not in hv.calls


class _Overflowing(_Response):
    """A server that announces fewer bytes than it sends."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.headers = {"Content-Length": str(len(data) // 2)}


def test_a_server_sending_more_than_it_announced_is_cut_off() -> None:
    hv = FakeHypervisor()
    importer = ImageImporter(hv, opener=lambda url: _Overflowing(DATA), retry_after=3600)
    eventually(lambda: importer.ensure(_base()).failed, timeout=10, what="import refused")
    assert "more than the" in importer.ensure(_base()).message
    assert ("default", _base().volume) not in hv.volumes


def test_both_import_results_are_served_before_any_import_ends() -> None:
    # At 0 from the start, so an alert's increase() counts the first failure after a restart.
    for result in ("ok", "failed"):
        served = REGISTRY.get_sample_value("vmapi_libvirt_image_imports_total", {"result": result})
        assert served is not None
