"""The list-then-watch loop tells the API server's failures from its callers' bugs.

An API failure (an error status, a dropped connection, a body or a stream line the client cannot
decode) starts over from a fresh list after a backoff. A callback that raises is a bug: logged with
its traceback, counted in /metrics, and the loop goes on without listing again, since a new list
would fail the same way.

The loop runs against a scripted API server (in place of its `KubeApi`) behind the client library's
own `Watch`, so the stream is parsed as in production; backoffs are recorded instead of waited.
"""

import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY
from pydantic import BaseModel, ValidationError
from urllib3.exceptions import ProtocolError

from generic.adapters import listwatch
from generic.adapters.listwatch import ListWatch

Obj = dict[str, Any]
TARGET = ("example.vm-api.io", "v1alpha1", "widgets")


class Widget(BaseModel):
    """What the callers here parse each object's spec into."""

    size: int


def widget(name: str, version: str, size: object) -> Obj:
    return {"metadata": {"name": name, "resourceVersion": version}, "spec": {"size": size}}


def listing(version: str, *items: Obj) -> Obj:
    return {"metadata": {"resourceVersion": version}, "items": list(items)}


def line(kind: str, obj: Obj) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


class _Response:
    """A watch response as urllib3 hands it to the client: bytes in chunks."""

    status = 200

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def stream(self, amt: int | None = None, decode_content: bool = False) -> Iterator[bytes]:
        yield from self._chunks

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class ScriptedServer:
    """Answers the loop's lists and watches, in order, from a script; at its end it stops the
    loop, so a test sees exactly the calls it scripted and one more."""

    def __init__(
        self, *, lists: list[Obj | Exception], watches: list[list[bytes] | Exception]
    ) -> None:
        self.lists: deque[Obj | Exception] = deque(lists)
        self.watches: deque[list[bytes] | Exception] = deque(watches)
        self.calls: list[tuple[str, str | None]] = []
        self.stop_loop: Callable[[], None] = lambda: None
        self.finished = threading.Event()

    def list_cluster_custom_object(
        self, group: str, version: str, plural: str, **kwargs: Any
    ) -> object:
        assert (group, version, plural) == TARGET
        watching = bool(kwargs.get("watch"))
        self.calls.append(("watch" if watching else "list", kwargs.get("resource_version")))
        script: deque[Any] = self.watches if watching else self.lists
        if not script:
            self.stop_loop()
            self.finished.set()
            return _Response([]) if watching else listing("0")
        step = script.popleft()
        if isinstance(step, Exception):
            raise step
        return _Response(step) if watching else step


@dataclass
class Run:
    """What one loop handed on, reported and waited."""

    events: list[tuple[str, str]] = field(default_factory=list)
    failures: int = 0
    pauses: list[float] = field(default_factory=list)


def run(
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    *,
    name: str,
    target: Callable[[], tuple[str, str, str]] = lambda: TARGET,
    on_list: Callable[[list[Obj]], None] = lambda _objs: None,
    on_event: Callable[[str, Obj], None] = lambda _kind, _obj: None,
) -> Run:
    seen = Run()

    def failed() -> None:
        seen.failures += 1

    def handed(kind: str, obj: Obj) -> None:
        seen.events.append((kind, obj["metadata"]["name"]))
        on_event(kind, obj)

    monkeypatch.setattr(listwatch, "KubeApi", lambda _api: server)
    loop = ListWatch(
        client.ApiClient(),
        name=name,
        target=target,
        on_list=on_list,
        on_event=handed,
        on_failure=failed,
        pause=seen.pauses.append,
    )
    server.stop_loop = loop.stop
    loop.start()
    assert server.finished.wait(10), "the loop did not reach the end of its script"
    loop.stop(timeout=10)
    return seen


def callback_errors(name: str, callback: str) -> float:
    labels = {"watch": name, "callback": callback}
    return REGISTRY.get_sample_value("vmapi_generic_watch_callback_errors_total", labels) or 0.0


def loop_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == listwatch.__name__]


def test_an_event_whose_callback_raises_is_logged_counted_and_skipped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def parse(_kind: str, obj: Obj) -> None:
        Widget.model_validate(obj["spec"])  # pydantic's ValidationError is a ValueError

    server = ScriptedServer(
        lists=[listing("10")],
        watches=[
            [line("ADDED", widget("bad", "11", size="huge")), line("ADDED", widget("ok", "12", 1))]
        ],
    )
    name = "test-event-bug"
    with caplog.at_level(logging.INFO, logger=listwatch.__name__):
        seen = run(server, monkeypatch, name=name, on_event=parse)

    # The bad event is skipped, the next one handed on, and the watch resumed after both: no
    # list again, no backoff, no failure reported to the caller.
    assert seen.events == [("ADDED", "bad"), ("ADDED", "ok")]
    assert server.calls == [("list", None), ("watch", "10"), ("watch", "12")]
    assert seen.pauses == []
    assert seen.failures == 0
    assert callback_errors(name, "event") == 1
    [record] = loop_records(caplog)
    assert record.levelno == logging.ERROR
    assert "the event callback failed" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], ValidationError)


def test_a_list_whose_callback_raises_is_logged_counted_and_the_watch_follows(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def keep(objs: list[Obj]) -> None:
        for obj in objs:
            Widget.model_validate(obj["spec"])

    server = ScriptedServer(
        lists=[listing("20", widget("bad", "19", size="huge"))],
        watches=[[line("MODIFIED", widget("bad", "21", size=2))]],
    )
    name = "test-list-bug"
    with caplog.at_level(logging.INFO, logger=listwatch.__name__):
        seen = run(server, monkeypatch, name=name, on_list=keep)

    # The caller hears that its copy is not whole; events still follow from the list's version.
    assert server.calls == [("list", None), ("watch", "20"), ("watch", "21")]
    assert seen.events == [("MODIFIED", "bad")]
    assert seen.failures == 1
    assert seen.pauses == []
    assert callback_errors(name, "list") == 1
    [record] = loop_records(caplog)
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], ValidationError)


@pytest.mark.parametrize(
    "failure",
    [
        ApiException(status=503, reason="Service Unavailable"),
        ProtocolError("Connection aborted."),
        ConnectionResetError(104, "Connection reset by peer"),
        # What the client raises for a list body that is not JSON (a proxy's error page).
        json.JSONDecodeError("Expecting value", "<html>", 0),
    ],
    ids=["http-503", "connection-aborted", "connection-reset", "undecodable-body"],
)
def test_an_api_failure_lists_again_after_a_backoff(
    failure: Exception, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = ScriptedServer(
        lists=[failure, failure, listing("30")],
        watches=[[line("ADDED", widget("a", "31", size=1))]],
    )
    name = f"test-api-failure-{type(failure).__name__}"
    with caplog.at_level(logging.INFO, logger=listwatch.__name__):
        seen = run(server, monkeypatch, name=name)

    lists = [("list", None)] * 3
    assert server.calls == [*lists, ("watch", "30"), ("watch", "31")]
    assert seen.failures == 2
    # 0.5 s, then 1 s, each with up to 20 % jitter; the list that worked reset the backoff.
    assert len(seen.pauses) == 2
    assert 0.4 <= seen.pauses[0] <= 0.6
    assert 0.8 <= seen.pauses[1] <= 1.2
    assert seen.events == [("ADDED", "a")]
    assert callback_errors(name, "list") == callback_errors(name, "event") == 0
    records = loop_records(caplog)
    assert [r.levelno for r in records] == [logging.INFO, logging.INFO]
    assert all(r.exc_info is None and "listing again" in r.getMessage() for r in records)


def test_a_stream_line_that_is_no_event_lists_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The client yields no event for a line it cannot decode: which event it held is unknown.
    server = ScriptedServer(
        lists=[listing("40"), listing("45")],
        watches=[
            [line("ADDED", widget("a", "41", size=1)), b'{"type": "ADDED", "obj\n'],
            [line("ADDED", widget("b", "46", size=1))],
        ],
    )
    name = "test-malformed-stream"
    with caplog.at_level(logging.INFO, logger=listwatch.__name__):
        seen = run(server, monkeypatch, name=name)

    assert server.calls == [
        ("list", None),
        ("watch", "40"),
        ("list", None),
        ("watch", "45"),
        ("watch", "46"),
    ]
    assert seen.events == [("ADDED", "a"), ("ADDED", "b")]
    assert seen.failures == 1
    assert len(seen.pauses) == 1
    assert callback_errors(name, "event") == 0
    [record] = loop_records(caplog)
    assert record.levelno == logging.INFO
    assert record.exc_info is None


def test_a_410_in_the_stream_lists_again_without_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    server = ScriptedServer(
        lists=[listing("50"), listing("60")],
        watches=[[line("ERROR", gone)], [line("ADDED", widget("a", "61", size=1))]],
    )
    seen = run(server, monkeypatch, name="test-gone")

    assert server.calls == [
        ("list", None),
        ("watch", "50"),
        ("list", None),
        ("watch", "60"),
        ("watch", "61"),
    ]
    assert seen.failures == 0
    assert seen.events == [("ADDED", "a")]


def test_a_target_that_raises_is_counted_and_asked_again_after_a_backoff(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Without a target nothing can be listed: the bug is logged and counted, and the target
    # asked again after the backoff (its answer can change), never in a tight loop.
    answers: deque[tuple[str, str, str] | Exception] = deque([KeyError("versions"), TARGET])

    def target() -> tuple[str, str, str]:
        answer = answers.popleft() if answers else TARGET
        if isinstance(answer, Exception):
            raise answer
        return answer

    server = ScriptedServer(lists=[listing("70")], watches=[])
    name = "test-target-bug"
    with caplog.at_level(logging.INFO, logger=listwatch.__name__):
        seen = run(server, monkeypatch, name=name, target=target)

    assert server.calls == [("list", None), ("watch", "70")]
    assert callback_errors(name, "target") == 1
    assert seen.failures == 1
    assert len(seen.pauses) == 1
    assert 0.4 <= seen.pauses[0] <= 0.6
    [record] = loop_records(caplog)
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], KeyError)
