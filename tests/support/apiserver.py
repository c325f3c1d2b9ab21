"""A tiny Kubernetes API server in memory, on 127.0.0.1 only, for the shells' own requests.

It answers what the daemon's API calls need, the way kube-apiserver does: objects by path (custom
and built-in kinds, cluster-scoped and namespaced, the status subresource), lists with label and
field selectors, watches (the objects as ADDED events, then a BOOKMARK, held open a moment), creates
(409 when the object exists), replaces and patches (merge, strategic merge as a merge, JSON patch
with `test`; a resourceVersion in the body is a precondition: 409), deletes with preconditions, and
discovery answers set by the test. Every request is recorded, so a test can say exactly what was
sent; `fail` scripts error answers.

The client under test reaches it through `api_client()`, a `kubernetes` ApiClient with a bearer
token, as the daemon's own would be configured.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from kubernetes import client

__all__ = ["Request", "StubApiServer"]

Obj = dict[str, Any]
TOKEN = "stub-token"


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # percent-decoded
    query: str  # as sent
    content_type: str | None
    accept: str | None
    authorization: str | None
    body: Any = None


@dataclass
class _Failure:
    method: str
    path: str
    status: int
    times: int


@dataclass
class _Where:
    """A path taken apart: the resource collection, and the object's name and subresource."""

    collection: str
    name: str | None = None
    subresource: str | None = None

    @property
    def object_path(self) -> str:
        return f"{self.collection}/{self.name}"


def _where(path: str) -> _Where | None:
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        head = 2  # api, v1
    elif parts[0] == "apis":
        head = 3  # apis, group, version
    else:
        return None
    rest = parts[head:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        head, rest = head + 2, rest[2:]
    if not rest or len(rest) > 3:
        return None
    collection = "/" + "/".join(parts[: head + 1])
    return _Where(
        collection, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
    )


def _status(code: int, reason: str, message: str) -> Obj:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge(merged.get(key), value)
    return merged


class _TestFailedError(Exception):
    pass


def _json_patch(obj: Obj, ops: list[Obj]) -> Obj:
    """RFC 6902's add, replace, remove and test, on object members (what the daemon sends)."""
    result = copy.deepcopy(obj)
    for op in ops:
        *parents, last = [
            unquote(p).replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")
        ]
        node: Any = result
        for key in parents:
            node = node.setdefault(key, {})
        if op["op"] == "test":
            if node.get(last) != op["value"]:
                raise _TestFailedError(op["path"])
        elif op["op"] in ("add", "replace"):
            node[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            node.pop(last, None)
    return result


def _listed(collection: str, path: str) -> bool:
    """Whether the object at `path` is in `collection` (a cluster-wide collection of a
    namespaced kind holds the objects of every namespace)."""
    holder = path.rsplit("/", 1)[0]
    if holder == collection:
        return True
    head, _, plural = collection.rpartition("/")
    parts = holder.split("/")
    return (
        len(parts) >= 3
        and parts[-3] == "namespaces"
        and "/".join(parts[:-3]) == head
        and parts[-1] == plural
    )


def _selected(obj: Obj, query: dict[str, list[str]]) -> bool:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    for term in ",".join(query.get("labelSelector", [])).split(","):
        if not term:
            continue
        key, _, value = term.partition("=")
        if key not in labels or (value and labels[key] != value):
            return False
    for term in ",".join(query.get("fieldSelector", [])).split(","):
        if term.startswith("metadata.name=") and meta.get("name") != term.split("=", 1)[1]:
            return False
    return True


@dataclass
class _State:
    objects: dict[str, Obj] = field(default_factory=dict)
    discovery: dict[str, Obj] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    failures: list[_Failure] = field(default_factory=list)
    versions: itertools.count[int] = field(default_factory=lambda: itertools.count(100))


class StubApiServer:
    """Start with `with StubApiServer() as server:`; `server.api_client()` talks to it."""

    def __init__(self, *, watch_hold: float = 2.0) -> None:
        self._state = _State()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.watch_hold = watch_hold
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._http.daemon_threads = True
        self._thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # -- the test's side ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def api_client(self) -> client.ApiClient:
        configuration = client.Configuration(host=self.url)
        configuration.api_key = {"BearerToken": TOKEN}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return client.ApiClient(configuration)

    def start(self) -> StubApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._http.shutdown()
        self._http.server_close()

    def __enter__(self) -> StubApiServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def put(self, path: str, obj: Obj) -> Obj:
        """Store `obj` at its object path (a new resourceVersion; name and namespace from the
        path when it has none)."""
        where = _where(path)
        assert where is not None, path
        assert where.name is not None, path
        with self._lock:
            return self._store(where, copy.deepcopy(obj))

    def get(self, path: str) -> Obj | None:
        with self._lock:
            found = self._state.objects.get(path)
            return copy.deepcopy(found) if found is not None else None

    def set_discovery(self, path: str, answer: Obj) -> None:
        with self._lock:
            self._state.discovery[path.rstrip("/") or "/"] = answer

    def fail(self, method: str, path: str, status: int, *, times: int = 1) -> None:
        """Answer the next `times` `method` requests to `path` with `status`."""
        with self._lock:
            self._state.failures.append(_Failure(method, path, status, times))

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._state.requests)

    def clear_requests(self) -> None:
        with self._lock:
            self._state.requests.clear()

    # -- the server's side -------------------------------------------------------------------

    def _store(self, where: _Where, obj: Obj) -> Obj:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("name", where.name)
        parts = where.collection.split("/")
        if "namespaces" in parts:
            meta.setdefault("namespace", parts[parts.index("namespaces") + 1])
        meta.setdefault("uid", f"uid-{where.name}")
        meta["resourceVersion"] = str(next(self._state.versions))
        self._state.objects[where.object_path] = obj
        return copy.deepcopy(obj)

    def _answer(self, request: Request) -> tuple[int, Any]:
        with self._lock:
            self._state.requests.append(request)
            for failure in self._state.failures:
                if (failure.method, failure.path) == (request.method, request.path):
                    failure.times -= 1
                    if failure.times <= 0:
                        self._state.failures.remove(failure)
                    return failure.status, _status(failure.status, "Scripted", "scripted")
            if request.method == "GET" and (request.path.rstrip("/") or "/") in (
                self._state.discovery
            ):
                return 200, self._state.discovery[request.path.rstrip("/") or "/"]
            where = _where(request.path)
            if where is None:
                return 404, _status(404, "NotFound", f"no route {request.path}")
            return self._serve(request, where)

    def _serve(self, request: Request, where: _Where) -> tuple[int, Any]:
        objects = self._state.objects
        method, body = request.method, request.body
        if where.name is None:
            if method == "POST":
                name = (body.get("metadata") or {}).get("name")
                where = _Where(where.collection, name)
                if where.object_path in objects:
                    return 409, _status(409, "AlreadyExists", f"{name} already exists")
                return 201, self._store(where, copy.deepcopy(body))
            query = parse_qs(request.query)
            items = [
                copy.deepcopy(obj)
                for path, obj in objects.items()
                if _listed(where.collection, path) and _selected(obj, query)
            ]
            version = str(next(self._state.versions))
            return 200, {"kind": "List", "metadata": {"resourceVersion": version}, "items": items}
        current = objects.get(where.object_path)
        if current is None:
            return 404, _status(404, "NotFound", f"{where.name} not found")
        meta = current["metadata"]
        if method == "GET":
            return 200, copy.deepcopy(current)
        if method == "DELETE":
            wanted = (body or {}).get("preconditions") or {}
            if any(meta.get(k) != v for k, v in wanted.items()):
                return 409, _status(409, "Conflict", "precondition failed")
            del objects[where.object_path]
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        if method == "PUT":
            sent = (body.get("metadata") or {}).get("resourceVersion")
            if sent is not None and sent != meta["resourceVersion"]:
                return 409, _status(409, "Conflict", "the object has been modified")
            return 200, self._store(where, copy.deepcopy(body))
        if method == "PATCH":
            if isinstance(body, list):
                try:
                    patched = _json_patch(current, body)
                except _TestFailedError as failed:
                    return 422, _status(422, "Invalid", f"test failed at {failed}")
            else:
                sent = ((body or {}).get("metadata") or {}).get("resourceVersion")
                if sent is not None and sent != meta["resourceVersion"]:
                    return 409, _status(409, "Conflict", "the object has been modified")
                patched = _merge(current, body)
            return 200, self._store(where, patched)
        return 405, _status(405, "MethodNotAllowed", method)

    def _watch_lines(self, request: Request, where: _Where) -> list[bytes]:
        query = parse_qs(request.query)
        with self._lock:
            objs = [
                copy.deepcopy(obj)
                for path, obj in self._state.objects.items()
                if _listed(where.collection, path) and _selected(obj, query)
            ]
            version = str(next(self._state.versions))
        events = [{"type": "ADDED", "object": obj} for obj in objs]
        events.append({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": version}}})
        return [json.dumps(event).encode() + b"\n" for event in events]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: object) -> None:
                pass

            def _send(self, code: int, answer: Any) -> None:
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self) -> None:
                split = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                request = Request(
                    method=self.command,
                    path=unquote(split.path),
                    query=split.query,
                    content_type=self.headers.get("Content-Type"),
                    accept=self.headers.get("Accept"),
                    authorization=self.headers.get("Authorization"),
                    body=json.loads(raw) if raw else None,
                )
                where = _where(request.path)
                if (
                    request.method == "GET"
                    and "watch=true" in request.query.split("&")
                    and where is not None
                    and where.name is None
                ):
                    code, answer = server._answer(request)  # recorded; a scripted failure?
                    if code != 200:
                        self._send(code, answer)
                        return
                    self._stream(server._watch_lines(request, where), request)
                    return
                self._send(*server._answer(request))

            def _stream(self, lines: list[bytes], request: Request) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for line in lines:
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()
                seconds = parse_qs(request.query).get("timeoutSeconds", [""])[0]
                hold = min(float(seconds or server.watch_hold), server.watch_hold)
                server._stopping.wait(hold)
                with contextlib.suppress(OSError):  # the client stopped the watch
                    self.wfile.write(b"0\r\n\r\n")

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle  # noqa: N815

        return Handler
