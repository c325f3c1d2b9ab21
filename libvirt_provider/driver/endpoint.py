"""A remote host's connection, decided without I/O: which URIs are accepted, what the credentials
Secret must hold, the URI libvirt is finally given, and what a failed connection means.

Why here, pure: the rules are the security boundary of remote hosts (no transport without
authentication and encryption, host keys always verified, no user-supplied parameter that turns a
check off), and the mapping of libvirt's error text to a `Connected` reason is what users act on;
both are tested exhaustively without a network. The adapters only read the Secret, write the files
this module names, and call libvirt with the URI it builds.

Error messages never quote a Secret's values: only key names and sizes.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath
from urllib.parse import quote, urlsplit

from libvirt_provider import constants as c

__all__ = [
    "ConnectionProblemError",
    "Endpoint",
    "Transport",
    "classify_failure",
    "connect_uri",
    "credential_files",
    "file_names",
    "parse_endpoint",
    "required_keys",
    "summarize_failure",
]


class Transport(enum.Enum):
    """The remote transports the daemon offers: each authenticates the host and encrypts."""

    SSH = "qemu+ssh"  # the OpenSSH client, as a child process
    LIBSSH = "qemu+libssh"  # libssh inside libvirt: no process per connection
    TLS = "qemu+tls"  # libvirtd's TLS listener with X.509 client certificates

    @property
    def is_ssh(self) -> bool:
        return self is not Transport.TLS


# Offered elsewhere in libvirt, refused here, and why (said in the condition's message).
_REFUSED = {
    "qemu+tcp": "it is neither encrypted nor authenticated by default",
    "qemu+unix": "it reaches a local socket, not a remote host",
    "qemu+ext": "it runs an arbitrary external command",
    "qemu+libssh2": "use qemu+libssh (libssh2 cannot verify host keys from a known_hosts file)",
    "qemu": "a URI without a transport is this machine's own libvirtd",
}

SECRET_KEYS: dict[Transport, tuple[str, ...]] = {
    Transport.SSH: ("ssh-privatekey", "known_hosts"),
    Transport.LIBSSH: ("ssh-privatekey", "known_hosts"),
    Transport.TLS: ("ca.crt", "tls.crt", "tls.key"),
}

# The file each Secret key is written to: names libvirt's pkipath expects for TLS.
_FILE_NAMES = {
    "ssh-privatekey": "ssh-privatekey",
    "known_hosts": "known_hosts",
    "ca.crt": "cacert.pem",
    "tls.crt": "clientcert.pem",
    "tls.key": "clientkey.pem",
}

# A wrapper of the OpenSSH client (qemu+ssh): strict host-key checking against the Secret's
# known_hosts only, no prompts, no user or system configuration, bounded connect and liveness.
SSH_WRAPPER = "ssh"
# How much of ssh's own messages the wrapper passes on to libvirt (which keeps at most 1 KiB).
SSH_MESSAGE_BYTES = 600


class ConnectionProblemError(Exception):
    """Why the daemon does not (or cannot) reach a host: a `Connected` reason and a message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Endpoint:
    transport: Transport
    host: str
    port: int | None
    user: str | None
    path: str

    @property
    def address(self) -> str:
        """host[:port], with an IPv6 literal bracketed, as in a URI."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}" if self.port else host


_HOST = re.compile(r"^[A-Za-z0-9.\-:]+$")
_USER = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._\-]*$")


def parse_endpoint(uri: str) -> Endpoint:
    """The endpoint of `spec.connection.uri`, or `ConnectionProblemError(InvalidConnection)`."""

    def invalid(why: str) -> ConnectionProblemError:
        return ConnectionProblemError(
            c.REASON_INVALID_CONNECTION, f"connection URI {_redacted(uri)!r}: {why}"
        )

    try:
        parts = urlsplit(uri.strip())
        port = parts.port
    except ValueError as err:
        raise invalid(str(err)) from None
    scheme = parts.scheme.lower()
    if scheme in _REFUSED:
        raise invalid(f"transport {scheme} is not offered: {_REFUSED[scheme]}")
    try:
        transport = Transport(scheme)
    except ValueError:
        offered = ", ".join(t.value for t in Transport)
        raise invalid(f"unsupported scheme {scheme or '(none)'!r}; offered: {offered}") from None
    if parts.query or parts.fragment:
        raise invalid(
            "query parameters are not accepted: the daemon sets the transport's own (key "
            "files, host-key checking, certificates) from the Secret"
        )
    if parts.password is not None:
        raise invalid("a password in the URI is not accepted; put credentials in the Secret")
    host = parts.hostname or ""
    if not host or not _HOST.match(host):
        raise invalid("no host name")
    if parts.path != "/system":
        raise invalid(f"path {parts.path or '(none)'!r}: only /system (the host's libvirtd)")
    user = parts.username
    if user is not None and not _USER.match(user):
        raise invalid("the user name has characters libvirt cannot pass on")
    if transport.is_ssh and not user:
        raise invalid("an SSH URI names the user to log in as (user@host)")
    return Endpoint(transport=transport, host=host, port=port, user=user, path=parts.path)


def _redacted(uri: str) -> str:
    """The URI without a password or query values (never echoed into conditions or logs)."""
    text = re.sub(r"(//[^/@:]*):[^/@]*@", r"\1:***@", uri)
    return re.sub(r"=([^&]*)", "=***", text)


def required_keys(transport: Transport) -> tuple[str, ...]:
    return SECRET_KEYS[transport]


def file_names(transport: Transport) -> tuple[str, ...]:
    """The files `credential_files` writes for `transport` (libvirt's pkipath names for TLS)."""
    return tuple(_FILE_NAMES[key] for key in SECRET_KEYS[transport])


def credential_files(
    transport: Transport, data: Mapping[str, bytes], *, secret: str = "the Secret"
) -> dict[str, bytes]:
    """The files (name -> content) to write for `transport` from a Secret's decoded data, or
    `ConnectionProblemError(InvalidSecret)` naming what is missing or malformed (never the
    content). `secret` is how messages name the Secret."""
    missing = [k for k in SECRET_KEYS[transport] if not data.get(k)]
    if missing:
        have = ", ".join(sorted(data)) or "none"
        raise ConnectionProblemError(
            c.REASON_INVALID_SECRET,
            f"{secret} lacks {', '.join(missing)} (needed for {transport.value}; it has: {have})",
        )
    files: dict[str, bytes] = {}
    for key in SECRET_KEYS[transport]:
        value = data[key]
        problem = _shape_problem(key, value)
        if problem:
            raise ConnectionProblemError(
                c.REASON_INVALID_SECRET, f"{secret}'s {key} ({len(value)} bytes) {problem}"
            )
        files[_FILE_NAMES[key]] = value if value.endswith(b"\n") else value + b"\n"
    return files


def _shape_problem(key: str, value: bytes) -> str | None:
    text = value.strip()
    if key == "known_hosts":
        lines = [line for line in text.splitlines() if line.strip() and not line.startswith(b"#")]
        if not lines or any(len(line.split()) < 3 for line in lines):
            return "is not in known_hosts format (host key-type key, one per line)"
        return None
    if key == "ssh-privatekey":
        if not (text.startswith(b"-----BEGIN ") and b"PRIVATE KEY-----" in text):
            return "is not a PEM or OpenSSH private key"
        return None
    if key in ("ca.crt", "tls.crt"):
        if not text.startswith(b"-----BEGIN CERTIFICATE-----"):
            return "is not a PEM certificate"
        return None
    if key == "tls.key":
        if not (text.startswith(b"-----BEGIN ") and b"PRIVATE KEY-----" in text):
            return "is not a PEM private key"
        return None
    return None


def ssh_wrapper(directory: PurePath, *, connect_timeout: float) -> str:
    """The OpenSSH wrapper's script for the host whose credentials are in `directory`."""
    options = [
        "-F",
        "none",
        "-o",
        f"UserKnownHostsFile={directory / 'known_hosts'}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "CheckHostIP=no",
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "PasswordAuthentication=no",
        "-o",
        f"ConnectTimeout={max(1, int(connect_timeout))}",
        "-o",
        "ServerAliveInterval=10",
        "-o",
        "ServerAliveCountMax=3",
    ]
    # libvirt keeps at most 1 KiB of what the command writes to stderr, and fails with "Value too
    # large" beyond that, losing ssh's reason; a changed host key alone prints more (a banner and
    # the known_hosts path three times). Only the end of ssh's messages is passed on: it says why.
    command = "ssh " + " ".join(_sh_quote(o) for o in options) + ' "$@"'
    return (
        f"#!/bin/sh\n{{ {command} 2>&1 1>&3 3>&- | tail -c {SSH_MESSAGE_BYTES} 1>&2 3>&-; }} 3>&1\n"
    )


def _sh_quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def connect_uri(endpoint: Endpoint, directory: PurePath) -> str:
    """The URI libvirt is given: the user's endpoint plus the parameters that point the
    transport at the credential files in `directory` and keep every check on."""
    authority = f"{quote(endpoint.user)}@" if endpoint.user else ""
    base = f"{endpoint.transport.value}://{authority}{endpoint.address}{endpoint.path}"
    d = str(directory)
    if endpoint.transport is Transport.TLS:
        params = {"pkipath": d}
    elif endpoint.transport is Transport.LIBSSH:
        params = {
            "keyfile": f"{d}/ssh-privatekey",
            "known_hosts": f"{d}/known_hosts",
            "known_hosts_verify": "normal",
            "sshauth": "privkey",
        }
    else:
        params = {
            "keyfile": f"{d}/ssh-privatekey",
            "command": f"{d}/{SSH_WRAPPER}",
            "no_tty": "1",
        }
    query = "&".join(f"{k}={quote(v, safe='/')}" for k, v in params.items())
    return f"{base}?{query}"


# Checked in this order: a host-key failure also reads "connection reset" once ssh gives up, and
# an authentication failure may mention the closed channel.
_HOST_KEY = (
    "host key for server changed",
    "remote host identification has changed",
    "host key verification",
    "server's host key",
    "host key is unknown",
    "host key for server is unknown",
    "host key mismatch",
    "session host key",
    "host key is known",
    "was not accepted",
    "known_hosts",
    "changed (and",
)
_AUTH = (
    "permission denied",
    "authentication failed",
    "no authentication method",
    "all authentication methods failed",
    "auth failed",
    "access denied",
    "certificate",
    "tls handshake",
    "unable to verify",
    "failed to verify",
    "unknown ca",
    "bad certificate",
    "tls confirmation",
)
_UNREACHABLE = (
    "connection refused",
    "no route to host",
    "network is unreachable",
    "timed out",
    "timeout",
    "name or service not known",
    "could not resolve",
    "temporary failure in name resolution",
    "connection reset",
    "connection closed",
    "end of file while reading data",
    "broken pipe",
    "failed to connect socket",
    "unable to connect to server",
    "cannot recv data",
)


# Lines of OpenSSH's host-key warning that say nothing about this host (the banner, advice, the
# paths of the daemon's own files); what remains is joined into one line.
_SSH_NOISE = re.compile(
    r"^(@+|@ .*|IT IS POSSIBLE.*|Someone could be.*|It is also possible.*|The fingerprint.*|"
    r"SHA256:.*|Please contact.*|Add correct host key.*|Offending .* key in .*|\s*remove with:|"
    r"\s*ssh-keygen -f .*|Password authentication is disabled.*|"
    r"Keyboard-interactive authentication is disabled.*)$"
)


def summarize_failure(message: str) -> str:
    """libvirt's connection error as one readable line: ssh's multi-line banner and advice go."""
    kept = [line.strip() for line in message.splitlines() if not _SSH_NOISE.match(line.strip())]
    text = re.sub(r"@{3,}", "", " ".join(line for line in kept if line))
    return re.sub(r"\s{2,}", " ", text).strip()[:900]


def classify_failure(message: str) -> str:
    """The `Connected` reason for a failed connection, from libvirt's error text."""
    text = message.lower()
    if any(p in text for p in _HOST_KEY):
        return c.REASON_HOST_KEY_MISMATCH
    if any(p in text for p in _AUTH):
        return c.REASON_AUTHENTICATION_FAILED
    if any(p in text for p in _UNREACHABLE):
        return c.REASON_UNREACHABLE
    return c.REASON_PROTOCOL_ERROR
