"""A remote host's credentials: read from its Secret, written to files only the daemon can read.

Why files: libvirt's transports take key files, a known_hosts file and a PKI directory by path.
They live in one directory per host under a per-process root (0700; files 0600), on a tmpfs where
the system has one (`default_root`), so keys never reach a disk. A host's directory is rewritten
when its Secret's resourceVersion or its `spec.connection` changes, and removed when the host is
no longer served or the Secret is gone.

The Secret must be in the daemon's own namespace. Nothing here logs or raises with a Secret's
values: problems name keys and sizes only (`driver/endpoint.py`).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kubernetes import client
from urllib3.exceptions import HTTPError

from generic.adapters.kubeclient import (
    API_ERRORS,
    REQUEST_TIMEOUT,
    ApiFailure,
    KubeApi,
    describe_failure,
    failure_of,
)
from libvirt_provider import constants as c
from libvirt_provider.driver.endpoint import (
    SSH_WRAPPER,
    ConnectionProblemError,
    Transport,
    connect_uri,
    credential_files,
    parse_endpoint,
    required_keys,
    ssh_wrapper,
)
from libvirt_provider.host_api import HostConnection

__all__ = [
    "HostCredentials",
    "default_root",
    "make_root",
    "read_secret",
    "remove_root",
    "write_private",
]

log = logging.getLogger(__name__)


def default_root() -> Path:
    """Where credentials go by default: a tmpfs (the user's runtime directory, /dev/shm)."""
    for candidate in (os.environ.get("XDG_RUNTIME_DIR"), "/dev/shm"):
        if candidate and os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return Path(candidate)
    return Path(tempfile.gettempdir())


ROOT_PREFIX = "libvirt-provider-credentials-"
# In each root: the owning process's pid and start time. A dot name, which no host name can be.
OWNER_FILE = ".owner"
# A root without an owner file younger than this may be a process's that is just being made.
UNCLAIMED_GRACE_SECONDS = 60.0


def make_root(base: Path) -> Path:
    """This process's own directory under `base` (0700), removed by the caller at stop. Roots that
    processes now gone left behind (killed, or stopped past their deadline) are removed first:
    they hold key material nobody will use again."""
    base.mkdir(parents=True, exist_ok=True)
    for abandoned in abandoned_roots(base, alive=_process_alive, now=time.time()):
        log.info("removing the credentials of a process that is gone: %s", abandoned)
        remove_root(abandoned)
    root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX, dir=base))
    # 0600 as every file under the root: nothing there is for other users to read.
    fd = os.open(root / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as owner:
        owner.write(_identity(os.getpid()))
    return root


def abandoned_roots(base: Path, *, alive: Callable[[str], bool], now: float) -> list[Path]:
    """The credential roots under `base` whose owner (`alive` asked with its owner record) is
    gone; a root with no owner record counts only once older than the grace period."""
    found: list[Path] = []
    for root in sorted(base.glob(f"{ROOT_PREFIX}*")):
        try:
            owner = (root / OWNER_FILE).read_text()
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                if now - root.stat().st_mtime > UNCLAIMED_GRACE_SECONDS:
                    found.append(root)
            continue
        except OSError:
            continue
        if not alive(owner):
            found.append(root)
    return found


def _identity(pid: int) -> str:
    """A pid with its start time (in clock ticks since boot), so a reused pid is not mistaken
    for the process that wrote it."""
    return f"{pid} {_start_time(pid)}"


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    # The command name (field 2) may hold spaces; the fields after its ")" are plain.
    return stat.rsplit(")", 1)[1].split()[19]


def _process_alive(owner: str) -> bool:
    pid, _, start = owner.strip().partition(" ")
    if not pid.isdigit() or not Path(f"/proc/{pid}").exists():
        return False
    now = _start_time(int(pid))
    # A process that cannot be looked into is kept: its files are not ours to judge.
    return now in ("?", start)


class HostCredentials:
    """One remote host's credential files and the URI that points libvirt at them."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        host: str,
        namespace: str,
        root: Path,
        connect_timeout: float = c.CONNECT_TIMEOUT_SECONDS,
    ) -> None:
        self._core = KubeApi(api)
        self._host = host
        self._namespace = namespace
        self._dir = root / host
        self._connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._connection: HostConnection | None = None
        # (connection, Secret resourceVersion) the files on disk were written from.
        self._written: tuple[HostConnection, str] | None = None

    def set_connection(self, connection: HostConnection | None) -> bool:
        """The host's `spec.connection` as the user has it now; True when it changed."""
        with self._lock:
            changed = connection != self._connection
            self._connection = connection
            return changed

    def uri(self) -> str:
        """Write the credentials and return the URI to open; `ConnectionProblemError` when the
        spec or the Secret is not usable (nothing is attempted then)."""
        with self._lock:
            connection = self._connection
            if connection is None:
                raise ConnectionProblemError(
                    c.REASON_INVALID_CONNECTION, "the LibvirtHost has no spec.connection"
                )
            endpoint = parse_endpoint(connection.uri)
            ref = connection.secret_ref
            if ref is None:
                raise ConnectionProblemError(
                    c.REASON_SECRET_NOT_FOUND,
                    f"spec.connection.secretRef is not set; {endpoint.transport.value} needs a "
                    "Secret with " + ", ".join(required_keys(endpoint.transport)),
                )
            if ref.namespace not in (None, "", self._namespace):
                raise ConnectionProblemError(
                    c.REASON_SECRET_NOT_ALLOWED,
                    f"secretRef names namespace {ref.namespace!r}; credentials are read only from "
                    f"the daemon's own namespace {self._namespace!r}",
                )
            version, data = self._read_secret(ref.name)
            if self._written != (connection, version):
                files = credential_files(endpoint.transport, data)
                self._write(files, ssh=endpoint.transport is Transport.SSH)
                self._written = (connection, version)
            return connect_uri(endpoint, self._dir)

    def secret_version(self) -> str | None:
        """The Secret's resourceVersion now (None: gone, or may not be read), for noticing a
        rotation. `ConnectionProblemError` when the API server did not answer: that is no news
        about the Secret, and must not drop a working connection."""
        # Under the lock, as `uri()`: a Secret found gone removes the files it may be writing.
        with self._lock:
            connection = self._connection
            if connection is None or connection.secret_ref is None:
                return None
            try:
                return self._read_secret(connection.secret_ref.name)[0]
            except ConnectionProblemError as problem:
                if problem.reason == c.REASON_SECRET_NOT_FOUND:
                    return None
                raise

    def remove(self) -> None:
        with self._lock:
            self._forget_files()

    def _read_secret(self, name: str) -> tuple[str, dict[str, bytes]]:
        try:
            return read_secret(self._core, self._namespace, name)
        except ConnectionProblemError as problem:
            if problem.reason == c.REASON_SECRET_NOT_FOUND:
                self._forget_files()
            raise

    def _forget_files(self) -> None:
        self._written = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def _write(self, files: dict[str, bytes], *, ssh: bool) -> None:
        # Written into a fresh directory then swapped in: a connection being opened never reads a
        # half-written key, and a rotated key leaves nothing of the old one behind.
        fresh = Path(tempfile.mkdtemp(prefix=f".{self._host}-", dir=self._dir.parent))
        try:
            for name, content in files.items():
                write_private(fresh / name, content)
            if ssh:
                wrapper = fresh / SSH_WRAPPER
                fd = os.open(wrapper, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
                with os.fdopen(fd, "w") as out:
                    out.write(ssh_wrapper(self._dir, connect_timeout=self._connect_timeout))
                if not os.access(wrapper, os.X_OK):
                    raise ConnectionProblemError(
                        c.REASON_PROTOCOL_ERROR,
                        f"{self._dir.parent} does not allow running programs (noexec), which "
                        "qemu+ssh needs; use qemu+libssh or a --credentials-dir that allows it",
                    )
            old = self._dir.with_name(f".{self._host}.old")
            shutil.rmtree(old, ignore_errors=True)
            if self._dir.exists():
                self._dir.rename(old)
            fresh.rename(self._dir)
            shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(fresh, ignore_errors=True)
            raise
        log.info("host %s: credentials written", self._host)


def read_secret(core: KubeApi, namespace: str, name: str) -> tuple[str, dict[str, bytes]]:
    """A Secret's resourceVersion and decoded data. `ConnectionProblemError`: `SecretNotFound`
    when it does not exist or RBAC refuses it (news about the Secret), `Unreachable` when the API
    server did not answer (none). Messages name the Secret, never a value."""
    try:
        secret = core.read_namespaced_secret(name, namespace, _request_timeout=REQUEST_TIMEOUT)
    except (HTTPError, OSError) as err:
        # The type alone: the message names connection objects, different on every try.
        raise ConnectionProblemError(
            c.REASON_UNREACHABLE, f"reading Secret {namespace}/{name}: {type(err).__name__}"
        ) from None
    except API_ERRORS as err:  # an error answer
        failure = failure_of(err)
        if failure in (ApiFailure.NOT_FOUND, ApiFailure.FORBIDDEN):
            what = (
                "does not exist"
                if failure is ApiFailure.NOT_FOUND
                else "may not be read by the daemon"
            )
            raise ConnectionProblemError(
                c.REASON_SECRET_NOT_FOUND, f"Secret {namespace}/{name} {what}"
            ) from None
        raise ConnectionProblemError(
            c.REASON_UNREACHABLE, f"reading Secret {namespace}/{name}: {describe_failure(err)}"
        ) from None
    data: dict[str, bytes] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            data[key] = base64.b64decode(value or "")
        except ValueError:
            data[key] = b""
    meta = secret.get("metadata") or {}
    return str(meta.get("resourceVersion") or ""), data


def write_private(path: Path, content: bytes) -> None:
    """`path` (0600) holding `content`, replaced in one rename: a reader sees the old file or the
    new one, never a part."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            # mkstemp makes it 0600 already; said again so that no platform ever widens it.
            os.fchmod(out.fileno(), 0o600)
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def remove_root(root: Path) -> None:
    with contextlib.suppress(OSError):
        shutil.rmtree(root)
