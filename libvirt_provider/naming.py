"""Names this provider gives to libvirt objects: domains and the volumes a machine owns.

A name is derived, never taken verbatim from user input: it keeps only characters that are safe in
libvirt names, file names and XML, is bounded in length, and always ends in a hash. Nothing here
can produce `/`, a leading dot, or `..`.

The hash covers the machine's uid as well as its namespace and name, and is 64 bits long: a name
belongs to one object for its whole life, so two tenants' machines never share one in practice (a
tenant chooses names, never uids), and a machine made again under an old name gets new volumes
instead of the disks its predecessor left behind. Machines created before names carried the uid
keep theirs (`legacy_domain_name`, a 32-bit hash of namespace and name): `machine_domain_name`
picks the name a machine already has. NIC MACs follow the same rule (`machine_mac_address`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Set as AbstractSet

__all__ = [
    "MAX_DOMAIN_NAME",
    "carries_identity",
    "console_log_file",
    "domain_name",
    "is_machine_volume",
    "legacy_domain_name",
    "legacy_mac_address",
    "mac_address",
    "machine_domain_name",
    "machine_mac_address",
    "volume_name",
]

MAX_DOMAIN_NAME = 63
_HASH_LEN = 16  # hex digits: 64 bits
_LEGACY_HASH_LEN = 8
_ROLE_HASH_LEN = 8
_UNSAFE = re.compile(r"[^a-z0-9.-]+|\.{2,}")


def _digest(*parts: str) -> str:
    joined = "\x00".join(parts).encode("utf-8", "surrogatepass")
    return hashlib.sha256(joined).hexdigest()


def _readable(text: str, limit: int) -> str:
    cleaned = _UNSAFE.sub("-", text.lower()).strip(".-")
    return cleaned[:limit].strip(".-")


def _domain_name(namespace: str, name: str, suffix: str) -> str:
    room = MAX_DOMAIN_NAME - len(suffix) - 2
    ns = _readable(namespace, room // 3) or "ns"
    base = _readable(name, room - len(ns)) or "vm"
    return f"{ns}_{base}-{suffix}"


def domain_name(namespace: str, name: str, uid: str) -> str:
    """`<namespace>_<name>-<hash>`, at most 63 safe characters, unique per machine object: the
    64-bit hash covers the uid, so the name cannot be aimed at another machine's."""
    return _domain_name(namespace, name, _digest(namespace, name, uid)[:_HASH_LEN])


def legacy_domain_name(namespace: str, name: str) -> str:
    """The name machines created before names carried the uid were given (and keep)."""
    return _domain_name(namespace, name, _digest(namespace, name)[:_LEGACY_HASH_LEN])


def machine_domain_name(namespace: str, name: str, uid: str, *, recorded: str | None) -> str:
    """The domain name of the machine (`namespace`, `name`, `uid`).

    `recorded` is the name its status carries. A machine keeps the legacy name it was created
    with; any other recorded value is ignored, since a status is not proof of anything: the only
    names a machine can have are the two derived from its own identity.
    """
    if recorded is not None and recorded == legacy_domain_name(namespace, name):
        return recorded
    return domain_name(namespace, name, uid)


def carries_identity(domain: str, namespace: str, name: str, uid: str) -> bool:
    """Whether `domain` is the uid-derived name of this machine: then every volume named after
    it is the machine's own (see `volume_name`), which a legacy name cannot prove."""
    return domain == domain_name(namespace, name, uid)


# What `volume_name` produces: `<domain name>--<role>.<extension>`, the domain name ending in the
# hash of domain_name() or legacy_domain_name(). A volume of this shape belongs to some machine.
_MACHINE_VOLUME = re.compile(r"^[a-z0-9.-]+_[a-z0-9.-]+-(?:[0-9a-f]{16}|[0-9a-f]{8})--")


def is_machine_volume(volume: str) -> bool:
    """Whether `volume` is named like a volume this provider made for a machine."""
    return _MACHINE_VOLUME.match(volume) is not None


def volume_name(domain: str, role: str, *, extension: str) -> str:
    """Name of a volume this machine owns, e.g. `<domain>--boot.qcow2`, `<domain>--data-logs.raw`.

    Prefixed with the domain name so every volume of a machine can be found by listing its pool.
    """
    readable = _readable(role, 40) or "disk"
    if readable != role:
        readable = f"{readable}-{_digest(role)[:_ROLE_HASH_LEN]}"
    return f"{domain}--{readable}.{extension}"


def console_log_file(directory: str | None, domain: str) -> str | None:
    """`<directory>/<domain>.serial.log`, where the serial console of `domain` is logged; None
    when the host keeps no console logs."""
    if directory is None:
        return None
    return f"{directory.rstrip('/')}/{domain}.serial.log"


def mac_address(uid: str, interface: str) -> str:
    """A stable MAC from uid and NIC name: a locally administered unicast address with 46 bits of
    the hash (the first octet's two low bits say "local" and "unicast"). 24 bits, qemu's 52:54:00
    range as before, gave even odds of a collision at about 4,800 NICs on one network; 46 bits
    give one in about ten million at that size."""
    raw = bytearray.fromhex(_digest(uid, interface)[:12])
    raw[0] = (raw[0] & 0xFC) | 0x02
    return ":".join(f"{octet:02x}" for octet in raw)


def legacy_mac_address(uid: str, interface: str) -> str:
    """The MAC NICs were given before `mac_address` (and keep): 52:54:00 and 24 bits of hash."""
    tail = _digest(uid, interface)[:6]
    return "52:54:00:" + ":".join(tail[i : i + 2] for i in range(0, 6, 2))


def machine_mac_address(uid: str, interface: str, *, existing: AbstractSet[str]) -> str:
    """The MAC of the NIC `interface` of machine `uid`: the legacy one when the machine's domain
    already has it (`existing`: the MACs in its definition), so no NIC changes under a running
    guest; otherwise `mac_address`."""
    legacy = legacy_mac_address(uid, interface)
    return legacy if legacy in existing else mac_address(uid, interface)
