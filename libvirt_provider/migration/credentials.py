"""A host's migration client credentials from a Secret, decided without I/O.

In a peer-to-peer migration the source's libvirtd opens the target's TLS listener itself, so the
client certificate is read by the source host's libvirtd from a folder named in the URI
(`?pkipath=`). With `--migration-secret` the daemon fills that folder from a Secret in its own
namespace (a kubernetes.io/tls Secret plus `ca.crt`), as a remote host's credentials come from
one (`driver/endpoint.py` validates the keys for both). What is decided here: whether the
Secret's data can be used, what a source tells the user when it cannot (the migration is refused
before anything is copied), when the files must be written again, and in which subfolder.

Each resourceVersion of the Secret is written into a subfolder of its own, made whole under a
temporary name and renamed into place, and the URI names that subfolder: libvirtd reads the
three files when it opens the target, and a rotation in between must never hand it a new key
beside an old certificate. The subfolder before the current one is kept, for a copy that was
given its path a moment before the rotation and has not opened its connection yet.

Messages name the Secret and its keys, never a value.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from libvirt_provider import constants as c
from libvirt_provider.driver.endpoint import (
    ConnectionProblemError,
    Transport,
    credential_files,
    file_names,
    required_keys,
)

__all__ = [
    "PKI_FILES",
    "SECRET_KEYS",
    "VERSION_PREFIX",
    "CredentialsProblemError",
    "SecretName",
    "pki_files",
    "stale",
    "superseded",
    "unusable",
    "version_folder",
]

# The Secret's keys (ca.crt, tls.crt, tls.key) and libvirt's pkipath names they are written as
# (cacert.pem, clientcert.pem, clientkey.pem): the same as a qemu+tls remote host's.
SECRET_KEYS: tuple[str, ...] = required_keys(Transport.TLS)
PKI_FILES: tuple[str, ...] = file_names(Transport.TLS)
# Subfolders of the pkipath folder, one per resourceVersion written.
VERSION_PREFIX = "v-"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class CredentialsProblemError(Exception):
    """The source cannot have its migration client credentials: the migration is refused."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.reason = c.MIGRATION_REASON_CREDENTIALS_MISSING
        self.message = message


@dataclass(frozen=True)
class SecretName:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"Secret {self.namespace}/{self.name} (--migration-secret)"


def unusable(secret: SecretName, detail: str, *, host: str) -> CredentialsProblemError:
    """The refusal for a source whose credentials cannot be had; `detail` says why."""
    return CredentialsProblemError(
        f"host {host} has no usable TLS client credentials to open the target's libvirtd with: "
        f"{detail}; nothing was copied and the machine keeps running on host {host}"
    )


def pki_files(secret: SecretName, data: Mapping[str, bytes], *, host: str) -> dict[str, bytes]:
    """The pkipath files (name -> content) from the Secret's decoded data, or the refusal naming
    the missing or malformed key."""
    try:
        return credential_files(Transport.TLS, data, secret=str(secret))
    except ConnectionProblemError as problem:
        raise unusable(secret, problem.message, host=host) from None


def stale(written: str | None, version: str, present: Collection[str]) -> bool:
    """Whether the folder must be written (again): this process has not written the Secret's
    current resourceVersion yet (a first use, or the Secret changed), or a file is gone."""
    return written != version or not set(PKI_FILES) <= set(present)


def version_folder(version: str) -> str:
    """The subfolder's name for the files written from the Secret at `version` (an opaque
    string: anything but a file name's safe characters is replaced)."""
    return VERSION_PREFIX + (_UNSAFE.sub("_", version)[:64] or "_")


def superseded(existing: Iterable[str], *, current: str, previous: str | None) -> list[str]:
    """The version subfolders to delete once `current` is in place: all but it and `previous`."""
    keep = {current, previous}
    return sorted(n for n in existing if n.startswith(VERSION_PREFIX) and n not in keep)
