"""Names this provider gives to libvirt objects: domains and the volumes a machine owns.

A name is derived, never taken verbatim from user input: it keeps only characters that are safe in
libvirt names, file names and XML, is bounded in length, and always ends in a short hash of the
exact input, so two different machines never share a name even when sanitising or truncation makes
their readable parts equal. Nothing here can produce `/`, a leading dot, or `..`.
"""

from __future__ import annotations

import hashlib
import re

__all__ = [
    "MAX_DOMAIN_NAME",
    "console_log_file",
    "domain_name",
    "is_machine_volume",
    "mac_address",
    "volume_name",
]

MAX_DOMAIN_NAME = 63
_HASH_LEN = 8
_UNSAFE = re.compile(r"[^a-z0-9.-]+|\.{2,}")


def _digest(*parts: str) -> str:
    joined = "\x00".join(parts).encode("utf-8", "surrogatepass")
    return hashlib.sha256(joined).hexdigest()


def _readable(text: str, limit: int) -> str:
    cleaned = _UNSAFE.sub("-", text.lower()).strip(".-")
    return cleaned[:limit].strip(".-")


def domain_name(namespace: str, name: str) -> str:
    """`<namespace>_<name>-<hash>`, at most 63 safe characters, unique per (namespace, name)."""
    suffix = _digest(namespace, name)[:_HASH_LEN]
    room = MAX_DOMAIN_NAME - _HASH_LEN - 2
    ns = _readable(namespace, room // 3) or "ns"
    base = _readable(name, room - len(ns)) or "vm"
    return f"{ns}_{base}-{suffix}"


# What `volume_name` produces: `<domain name>--<role>.<extension>`, the domain name ending in the
# hash of domain_name(). A volume of this shape belongs to some machine.
_MACHINE_VOLUME = re.compile(r"^[a-z0-9.-]+_[a-z0-9.-]+-[0-9a-f]{8}--")


def is_machine_volume(volume: str) -> bool:
    """Whether `volume` is named like a volume this provider made for a machine."""
    return _MACHINE_VOLUME.match(volume) is not None


def volume_name(domain: str, role: str, *, extension: str) -> str:
    """Name of a volume this machine owns, e.g. `<domain>--boot.qcow2`, `<domain>--data-logs.raw`.

    Prefixed with the domain name so every volume of a machine can be found by listing its pool.
    """
    readable = _readable(role, 40) or "disk"
    if readable != role:
        readable = f"{readable}-{_digest(role)[:_HASH_LEN]}"
    return f"{domain}--{readable}.{extension}"


def console_log_file(directory: str | None, domain: str) -> str | None:
    """`<directory>/<domain>.serial.log`, where the serial console of `domain` is logged; None
    when the host keeps no console logs."""
    if directory is None:
        return None
    return f"{directory.rstrip('/')}/{domain}.serial.log"


def mac_address(uid: str, interface: str) -> str:
    """A stable MAC in qemu's locally administered 52:54:00 range, from uid and NIC name."""
    tail = _digest(uid, interface)[:6]
    return "52:54:00:" + ":".join(tail[i : i + 2] for i in range(0, 6, 2))
