"""A throwaway TLS server identity and a handshaken pair of sockets, for tests and benches of the
stream loops that need real TLS but no lab (the `openssl` command makes the certificate;
tests/lab/install-deps.sh installs it, the lab's PKI needs it too)."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path

__all__ = ["contexts", "handshaken", "openssl_cert", "self_signed"]

_LEAF = """[req]
distinguished_name = dn
[dn]
[leaf]
subjectAltName = DNS:{name}
"""


def openssl_cert(
    cnf: Path,
    section: str,
    subject: str,
    *,
    key: Path,
    cert: Path,
    ca: tuple[Path, Path] | None = None,
    days: int = 2,
) -> None:
    """A P-256 key and its certificate with `cnf`'s extensions `section`: self-signed, or
    signed by `ca` (its certificate and key)."""
    assert shutil.which("openssl"), "no openssl command to make a certificate"
    cmd = [
        "openssl", "req", "-x509", "-new", "-config", str(cnf), "-extensions", section,
        "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(cert), "-subj", subject, "-days", str(days), "-sha256",
    ]  # fmt: skip
    if ca is not None:
        cmd += ["-CA", str(ca[0]), "-CAkey", str(ca[1])]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for DNS name `name`, valid a day; its and its key's paths."""
    cnf = directory / f"{name}.cnf"
    cnf.write_text(_LEAF.format(name=name))
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    openssl_cert(cnf, "leaf", f"/CN={name}", key=key, cert=cert, days=1)
    return cert, key


def contexts(directory: Path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a fresh certificate for `name` and a client context trusting it."""
    cert, key = self_signed(directory, name)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(cert))


def handshaken(
    client: socket.socket,
    server: socket.socket,
    pair: tuple[ssl.SSLContext, ssl.SSLContext],
    name: str,
    *,
    timeout: float = 20.0,
) -> tuple[ssl.SSLSocket, ssl.SSLSocket]:
    """Both ends of a connected pair wrapped in TLS, the handshake done (the server's side on a
    thread, since each side's handshake waits for the other's)."""
    server_context, client_context = pair
    accepted: list[ssl.SSLSocket] = []
    thread = threading.Thread(
        target=lambda: accepted.append(server_context.wrap_socket(server, server_side=True)),
        daemon=True,
    )
    thread.start()
    wrapped = client_context.wrap_socket(client, server_hostname=name)
    thread.join(timeout)
    assert accepted, "the server's side of the TLS handshake did not finish"
    return wrapped, accepted[0]
