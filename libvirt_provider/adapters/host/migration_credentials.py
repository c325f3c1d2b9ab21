"""This host's migration client credentials: read from `--migration-secret`, written into the
`--migration-pkipath` folder that the host's libvirtd reads when it opens a target's libvirtd.

Every use reads the Secret first (one GET), so a rotated Secret is written before the next
migration uses it and a deleted or broken one refuses that migration (`migration/credentials.py`
decides; this shell reads and writes). Each file is replaced in one rename (`write_private`):
the folder is a host path shared with libvirtd, which reads it by name, so it cannot be swapped
as a whole as a remote host's directory is.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path

from kubernetes import client

from generic.adapters.kubeclient import KubeApi
from libvirt_provider import constants as c
from libvirt_provider.adapters.host.credentials import read_secret, write_private
from libvirt_provider.driver.endpoint import ConnectionProblemError
from libvirt_provider.errors import ProviderError
from libvirt_provider.migration.credentials import (
    PKI_FILES,
    CredentialsProblemError,
    SecretName,
    pki_files,
    stale,
    unusable,
)

__all__ = ["MigrationCredentials"]

log = logging.getLogger(__name__)


class MigrationCredentials:
    """The pkipath folder of one host, kept in step with its Secret."""

    def __init__(
        self, api: client.ApiClient, *, host: str, namespace: str, secret: str, folder: Path
    ) -> None:
        self._core = KubeApi(api)
        self._host = host
        self._secret = SecretName(namespace, secret)
        self._folder = folder
        self._lock = threading.Lock()
        # The Secret's resourceVersion the files were last written from (None: not by us yet).
        self._written: str | None = None

    def pkipath(self) -> str:
        """The folder, its files written from the Secret as it is now.
        `CredentialsProblemError` when the Secret cannot be used (the migration is refused);
        `ProviderError` when the API server did not answer (the pass is tried again)."""
        with self._lock:
            try:
                version, data = read_secret(self._core, self._secret.namespace, self._secret.name)
            except ConnectionProblemError as problem:
                if problem.reason != c.REASON_SECRET_NOT_FOUND:
                    raise ProviderError(problem.message) from None
                # Gone or refused: a revocation, so the old client key goes too.
                self._remove()
                detail = f"{problem.message} (--migration-secret)"
                refusal = unusable(self._secret, detail, host=self._host)
                log.warning("migration credentials: %s", refusal.message)
                raise refusal from None
            present = [name for name in PKI_FILES if (self._folder / name).is_file()]
            if stale(self._written, version, present):
                try:
                    files = pki_files(self._secret, data, host=self._host)
                except CredentialsProblemError as refusal:
                    log.warning("migration credentials: %s", refusal.message)
                    raise
                self._folder.mkdir(mode=0o700, exist_ok=True)
                for name, content in files.items():
                    write_private(self._folder / name, content)
                self._written = version
                log.info(
                    "migration credentials written into %s from %s, resourceVersion %s",
                    self._folder,
                    self._secret,
                    version,
                )
            return str(self._folder)

    def _remove(self) -> None:
        self._written = None
        for name in PKI_FILES:
            with contextlib.suppress(FileNotFoundError):
                (self._folder / name).unlink()
