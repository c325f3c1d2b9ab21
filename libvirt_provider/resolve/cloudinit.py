"""The cloud-init NoCloud seed: meta-data, user-data and network-config on a `cidata` ISO.

Built entirely in memory with pycdlib (never in a temporary directory), so Secret contents touch no
disk on the host except inside the pool volume the controller uploads the ISO into. The ISO has
Joliet and Rock Ridge names (`meta-data`, `user-data`, `network-config`) because cloud-init looks
the files up by those exact lowercase names, which plain ISO 9660 cannot spell.

It writes no default user, password or key: only what the VM asked for.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import struct_time
from typing import Any, Final

import yaml

from libvirt_provider.resolved import CloudInitData

__all__ = [
    "VOLUME_LABEL",
    "NetworkInterfaceConfig",
    "build_cidata_iso",
    "cloud_init_digest",
    "instance_id",
    "legacy_cloud_init_digest",
    "meta_data",
    "network_config",
]

VOLUME_LABEL = "cidata"
# NoCloud insists on a user-data file; an empty cloud-config is the "nothing to do" document.
EMPTY_USER_DATA = b"#cloud-config\n{}\n"
# The one date every seed carries (2000-01-01T00:00:00Z): the seed's bytes then depend on its
# inputs only, so a migration's target, which renders the CD-ROM again for the running guest,
# gives it the very bytes it had on the source (libvirt does not copy a read-only disk).
SEED_EPOCH: Final = 946_684_800.0


@dataclass(frozen=True)
class NetworkInterfaceConfig:
    """One NIC of a generated network-config (version 2), matched in the guest by MAC address."""

    name: str
    mac: str
    addresses: Sequence[str] = ()  # with prefix length, e.g. 10.0.0.5/24
    dhcp4: bool = True
    dhcp6: bool = False
    gateway4: str | None = None
    gateway6: str | None = None


# The latest digests, by their inputs. A machine's passes resolve its seed again and again from the
# same Secret data (the daemon keeps the decoded bytes of an unchanged Secret: the very objects,
# whose hash Python caches), so each pass finds its digests here instead of hashing up to 1 MiB of
# user-data twice. Kept few: a key holds its contents.
_DIGESTS_KEPT = 32
_digests: OrderedDict[tuple[object, ...], str] = OrderedDict()
_digests_lock = threading.Lock()


def _remembered(key: tuple[object, ...], compute: Callable[[], str]) -> str:
    with _digests_lock:
        known = _digests.get(key)
        if known is not None:
            _digests.move_to_end(key)
            return known
    value = compute()
    with _digests_lock:
        _digests[key] = value
        while len(_digests) > _DIGESTS_KEPT:
            _digests.popitem(last=False)
    return value


def instance_id(
    uid: str,
    *,
    hostname: str | None,
    ssh_public_keys: Sequence[str],
    user_data: bytes | None,
    network_config: bytes | None,
) -> str:
    """`<uid>-<12 hex digits>`: the machine, and a digest of everything the seed delivers.

    cloud-init caches its data source by instance id and runs per-instance work (users, SSH keys,
    runcmd, network configuration) only for an id it has not seen. A seed whose content changed
    must therefore carry a new id, or a real guest keeps using what it read first; equal content
    gives the same id, so an unchanged seed never makes the guest start over.
    """
    parts = (hostname or "", "\n".join(ssh_public_keys), user_data, network_config)

    def compute() -> str:
        digest = hashlib.sha256()
        for part in parts:
            raw = b"\xff" if part is None else part.encode() if isinstance(part, str) else part
            digest.update(f"{len(raw)}\x00".encode())
            digest.update(raw)
        return digest.hexdigest()

    return f"{uid}-{_remembered(('instance', *parts), compute)[:12]}"


def meta_data(data: CloudInitData) -> bytes:
    document: dict[str, object] = {"instance-id": data.instance_id}
    if data.hostname is not None:
        document["local-hostname"] = data.hostname
    if data.ssh_public_keys:
        document["public-keys"] = list(data.ssh_public_keys)
    return yaml.safe_dump(document, sort_keys=True).encode()


def network_config(
    interfaces: Sequence[NetworkInterfaceConfig],
    *,
    nameservers: Sequence[str] = (),
    search_domains: Sequence[str] = (),
) -> bytes:
    """A network-config v2 document for the NICs, in order."""
    ethernets: dict[str, object] = {}
    for nic in interfaces:
        entry: dict[str, object] = {
            "match": {"macaddress": nic.mac},
            "dhcp4": nic.dhcp4,
            "dhcp6": nic.dhcp6,
        }
        if nic.addresses:
            entry["addresses"] = list(nic.addresses)
        routes = [
            {"to": "default", "via": via}
            for via in (nic.gateway4, nic.gateway6)
            if via is not None and nic.addresses
        ]
        if routes:
            entry["routes"] = routes
        if nameservers or search_domains:
            entry["nameservers"] = {
                "addresses": list(nameservers),
                "search": list(search_domains),
            }
        ethernets[nic.name] = entry
    document = {"network": {"version": 2, "ethernets": ethernets}}
    return yaml.safe_dump(document, sort_keys=False).encode()


def _files(data: CloudInitData) -> list[tuple[str, bytes]]:
    user = data.user_data.get_secret_value() if data.user_data is not None else EMPTY_USER_DATA
    files = [("meta-data", meta_data(data)), ("user-data", user)]
    if data.network_config is not None:
        files.append(("network-config", data.network_config.get_secret_value()))
    return files


def cloud_init_digest(data: CloudInitData, *, key: str) -> str:
    """HMAC-SHA256 over the seed's files, keyed with `key` (the VirtualMachine's uid): equal
    digests mean an equivalent ISO (timestamps aside). The digest sits in the domain's metadata,
    which libvirt's read-only socket shows to anyone on the host; unkeyed, it let them confirm a
    guess of the user-data (a password, a token) offline. The key is nowhere in libvirt."""
    files = _files(data)

    def compute() -> str:
        digest = hmac.new(key.encode(), digestmod=hashlib.sha256)
        _feed(digest, files)
        return digest.hexdigest()

    return _remembered(("seed", key, *files), compute)


def legacy_cloud_init_digest(data: CloudInitData) -> str:
    """The unkeyed sha256 domains made before `cloud_init_digest` carry (see the resolver)."""
    files = _files(data)

    def compute() -> str:
        digest = hashlib.sha256()
        _feed(digest, files)
        return digest.hexdigest()

    return _remembered(("legacy-seed", *files), compute)


def _feed(digest: hmac.HMAC | hashlib._Hash, files: Sequence[tuple[str, bytes]]) -> None:
    for name, content in files:
        digest.update(f"{name}\x00{len(content)}\x00".encode())
        digest.update(content)


class _SeedClock:
    """`time` as pycdlib's modules see it: always SEED_EPOCH, in UTC. pycdlib dates the volume
    descriptors, directory records and Rock Ridge entries with `time.time()` in the build's local
    time zone and takes no date from its caller, so two hosts (or two builds a second apart)
    would write different bytes for the same files."""

    def time(self) -> float:
        return SEED_EPOCH

    def localtime(self, seconds: float | None = None) -> struct_time:
        return time.gmtime(SEED_EPOCH if seconds is None else seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


_clock_lock = threading.Lock()
_dated = False


def _date_pycdlib() -> None:
    """Give every pycdlib module (all loaded by `import pycdlib`) the seed's clock, once."""
    global _dated  # noqa: PLW0603
    with _clock_lock:
        if _dated:
            return
        for name, module in list(sys.modules.items()):
            if name.split(".")[0] == "pycdlib" and getattr(module, "time", None) is time:
                module.time = _SeedClock()  # type: ignore[attr-defined]
        _dated = True


def build_cidata_iso(data: CloudInitData) -> bytes:
    """The NoCloud ISO image for `data`, as bytes ready to upload into a pool volume: the same
    bytes for the same inputs, whenever and wherever it is built."""
    # Imported here: only a machine being created (or its seed rewritten) needs it, and a daemon
    # that never builds a seed saves its import (~5 MiB).
    import pycdlib  # noqa: PLC0415

    _date_pycdlib()
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident=VOLUME_LABEL)
    try:
        for index, (name, content) in enumerate(_files(data)):
            iso.add_fp(
                io.BytesIO(content),
                len(content),
                f"/FILE{index}.;1",
                rr_name=name,
                joliet_path=f"/{name}",
            )
        out = io.BytesIO()
        iso.write_fp(out)
        return out.getvalue()
    finally:
        iso.close()
