"""A remote libvirt host that accepts TCP and never answers, on 127.0.0.1, and a client PKI for
libvirt's TLS transport to try it with.

Why here: the unit test of connection attempts and `bench/connect_bench.py` both point libvirt's
real TLS client at it. It needs no lab: only libvirt-python and the `openssl` command.
"""

from __future__ import annotations

import os
import selectors
import shutil
import socket
from pathlib import Path
from types import TracebackType

from generic.background import BackgroundLoop
from tests.support.tls import openssl_cert

__all__ = ["BlackHole", "process_figures", "tls_client_pki"]

_EXTENSIONS = """[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def tls_client_pki(directory: Path) -> Path | None:
    """A `?pkipath=` folder (cacert.pem, clientcert.pem, clientkey.pem) that libvirt's TLS client
    accepts, made with the openssl command; None when there is no openssl."""
    if shutil.which("openssl") is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    cnf = directory / "openssl.cnf"
    cnf.write_text(_EXTENSIONS)

    def cert(key: str, out: str, subject: str, section: str, ca: bool) -> None:
        signer = (directory / "cacert.pem", directory / "ca.key") if ca else None
        openssl_cert(cnf, section, subject, key=directory / key, cert=directory / out, ca=signer)

    cert("ca.key", "cacert.pem", "/CN=black hole test CA", "ca", ca=False)
    cert("clientkey.pem", "clientcert.pem", "/CN=black hole test client", "client", ca=True)
    (directory / "clientkey.pem").chmod(0o600)
    return directory


class BlackHole:
    """A listener on 127.0.0.1 that accepts every connection, reads and drops what arrives, and
    never sends a byte; it closes its end only when the client closed or shut down its own."""

    def __init__(self) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self.accepted = 0
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._loop = BackgroundLoop("black-hole", self._run)

    def __enter__(self) -> BlackHole:
        self._loop.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._loop.stop(timeout=5)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def open_connections(self) -> int:
        """Client connections this end still holds."""
        return len(self._selector.get_map()) - 1

    def _run(self, loop: BackgroundLoop) -> None:
        while not loop.stopping:
            for key, _ in self._selector.select(timeout=0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._listener:
                    try:
                        conn, _ = sock.accept()
                    except BlockingIOError:
                        continue
                    conn.setblocking(False)
                    self._selector.register(conn, selectors.EVENT_READ)
                    self.accepted += 1
                    continue
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._selector.unregister(sock)
                    sock.close()


def process_figures() -> tuple[int, int]:
    """This process's threads (the kernel's count, libvirt's own included) and open file
    descriptors."""
    threads = len(os.listdir("/proc/self/task"))
    fds = len(os.listdir("/proc/self/fd"))
    return threads, fds
