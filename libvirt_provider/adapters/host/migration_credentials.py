"""This host's migration client credentials: read from `--migration-secret`, written into the
`--migration-pkipath` folder that the host's libvirtd reads when it opens a target's libvirtd.

Every use reads the Secret first (one GET), so a rotated Secret is written before the next
migration uses it and a deleted or broken one refuses that migration (`migration/credentials.py`
decides; this shell reads and writes). Each Secret version gets a subfolder of the configured
folder (a host path shared with libvirtd), made whole under a temporary name and renamed into
place; the URI names it, so libvirtd never reads the three files mid-rotation.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
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
    VERSION_PREFIX,
    CredentialsProblemError,
    SecretName,
    pki_files,
    stale,
    superseded,
    unusable,
    version_folder,
)

# The subfolders this class makes: a version's, or one being made or set aside.
_OURS = (VERSION_PREFIX, ".new-", ".old-")

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
        # The Secret's resourceVersion the files were last written from (None: not by us yet),
        # and the subfolder holding them.
        self._written: str | None = None
        self._current: str | None = None
        self._previous: str | None = None

    def pkipath(self) -> str:
        """The subfolder holding the files of the Secret as it is now (written first if need be).
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
            current = self._folder / version_folder(version)
            present = [name for name in PKI_FILES if (current / name).is_file()]
            if stale(self._written, version, present):
                try:
                    files = pki_files(self._secret, data, host=self._host)
                except CredentialsProblemError as refusal:
                    log.warning("migration credentials: %s", refusal.message)
                    raise
                self._put(current, files)
                if self._current != current.name:
                    self._previous = self._current
                for name in superseded(
                    os.listdir(self._folder), current=current.name, previous=self._previous
                ):
                    shutil.rmtree(self._folder / name, ignore_errors=True)
                # Files an older daemon wrote straight into the folder.
                for name in PKI_FILES:
                    with contextlib.suppress(FileNotFoundError):
                        (self._folder / name).unlink()
                self._written, self._current = version, current.name
                log.info(
                    "migration credentials written into %s from %s, resourceVersion %s",
                    current,
                    self._secret,
                    version,
                )
            return str(current)

    def _put(self, current: Path, files: dict[str, bytes]) -> None:
        """`current` holding `files` (each 0600), made whole beside it and renamed into place."""
        self._folder.mkdir(mode=0o700, exist_ok=True)
        made = Path(tempfile.mkdtemp(prefix=".new-", dir=self._folder))
        try:
            for name, content in files.items():
                write_private(made / name, content)
            if current.exists():
                # The same version again (a file was removed behind the daemon's back).
                aside = Path(tempfile.mkdtemp(prefix=".old-", dir=self._folder))
                os.replace(current, aside / current.name)
                os.replace(made, current)
                shutil.rmtree(aside, ignore_errors=True)
            else:
                os.replace(made, current)
        except BaseException:
            shutil.rmtree(made, ignore_errors=True)
            raise

    def _remove(self) -> None:
        self._written = self._current = self._previous = None
        if not self._folder.is_dir():
            return
        for entry in self._folder.iterdir():
            if entry.is_dir() and entry.name.startswith(_OURS):
                shutil.rmtree(entry, ignore_errors=True)
            elif entry.name in PKI_FILES:
                entry.unlink(missing_ok=True)
