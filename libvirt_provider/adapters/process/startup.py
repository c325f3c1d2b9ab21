"""Checks of the daemon's own configuration, made once at start, before anything runs.

A path or URI flag that cannot work fails the same way on every reconcile, so it is caught here
with one line naming the flag and the value, and the daemon refuses to start (exit 2) instead
of reporting the same error on every machine. The one folder the daemon may create is the
console-log folder, and only when its parent exists: a missing parent is more likely a typo or
a missing mount than a folder to invent.

Not checked here, on purpose: whether libvirtd answers (it may be restarting; `/readyz` and the
machines' conditions report it) and whether the API server answers (the client retries).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from libvirt_provider.constants import HOST_LABEL, HOST_NAME_MAX_LENGTH, HOST_NAME_PATTERN

__all__ = ["ConfigError", "check_config", "check_host_name", "check_libvirt_uri"]

# Drivers whose domains the provider can render (qemu) or measure against (test); transports
# libvirt's remote driver knows.
_DRIVERS = frozenset({"qemu", "test"})
_TRANSPORTS = frozenset({"unix", "tcp", "tls", "ssh", "libssh", "libssh2", "ext"})
_SCHEME = re.compile(r"^(?P<driver>[a-z][a-z0-9]*)(\+(?P<transport>[a-z0-9]+))?$")


class ConfigError(ValueError):
    """A flag's value cannot work; the message names the flag and the value."""


@dataclass(frozen=True)
class PathFlags:
    """The daemon's flags that name files, folders and URIs."""

    kubeconfig: str | None
    libvirt_uri: str
    console_log_dir: str | None


def check_host_name(host: str) -> None:
    """The host's name becomes the value of the host label on its machines and the tail of its
    Lease's name: one Kubernetes refuses would make every bind and heartbeat fail."""
    where = f"--host {host!r}"
    if len(host) > HOST_NAME_MAX_LENGTH:
        raise ConfigError(
            f"{where}: {len(host)} characters; a host's name is at most {HOST_NAME_MAX_LENGTH} "
            f"(it is the value of the {HOST_LABEL} label): pass a shorter --host"
        )
    if re.fullmatch(HOST_NAME_PATTERN, host) is None:
        raise ConfigError(
            f"{where}: a host's name is a DNS subdomain in lower case (letters, digits, '-' "
            "and '.', starting and ending with a letter or digit), like a node's name"
        )


def check_libvirt_uri(uri: str) -> None:
    where = f"--libvirt-uri {uri!r}"
    parts = urlsplit(uri)
    match = _SCHEME.match(parts.scheme)
    if match is None or not uri.startswith(f"{parts.scheme}:/"):
        raise ConfigError(
            f"{where}: not a libvirt URI (driver[+transport]://[host]/path, e.g. qemu:///system)"
        )
    driver, transport = match.group("driver"), match.group("transport")
    if driver not in _DRIVERS:
        raise ConfigError(f"{where}: driver {driver!r} is not supported (qemu, or test)")
    if transport is not None and transport not in _TRANSPORTS:
        raise ConfigError(f"{where}: unknown transport {transport!r}")
    socket = parse_qs(parts.query).get("socket")
    if socket and not Path(socket[0]).parent.is_dir():
        raise ConfigError(f"{where}: the socket's folder {Path(socket[0]).parent} does not exist")


def _check_kubeconfig(path: str) -> None:
    where = f"--kubeconfig {path!r}"
    if not Path(path).is_file():
        raise ConfigError(f"{where}: no such file")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{where}: not readable by this user")


def _prepare_console_log_dir(path: str) -> str:
    where = f"--console-log-dir {path!r}"
    folder = Path(path)
    if not folder.is_absolute():
        # qemu runs in libvirtd's working directory, not ours.
        raise ConfigError(f"{where}: must be an absolute path")
    if not folder.exists():
        if not folder.parent.is_dir():
            raise ConfigError(f"{where}: neither it nor its parent {folder.parent} exists")
        try:
            folder.mkdir(mode=0o750)
        except FileExistsError:
            pass
        except OSError as err:
            raise ConfigError(f"{where}: cannot create it: {err.strerror}") from err
    if not folder.is_dir():
        raise ConfigError(f"{where}: not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{where}: not writable by this user (console logs are removed here)")
    return str(folder)


def check_config(flags: PathFlags) -> PathFlags:
    """The flags as the daemon should use them; raises `ConfigError` for the first that can't
    work. Creates the console-log folder when only it is missing."""
    if flags.kubeconfig:
        _check_kubeconfig(flags.kubeconfig)
    check_libvirt_uri(flags.libvirt_uri)
    if flags.console_log_dir:
        return replace(flags, console_log_dir=_prepare_console_log_dir(flags.console_log_dir))
    return flags
