"""A source host's migration client credentials from `--migration-secret`: what the Secret must
hold, when its files are written again, and the shell against a stub API server (the
files libvirtd reads, their mode, a rotation, a deletion, RBAC, an API server that does not
answer). The source's passes when it cannot have them are in `test_migration_reconciler.py`.
No value of the Secret reaches a message or a log line.
"""

from __future__ import annotations

import base64
import logging
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from libvirt_provider import constants as c
from libvirt_provider.adapters.host.migration_credentials import MigrationCredentials
from libvirt_provider.errors import ProviderError
from libvirt_provider.migration.credentials import (
    PKI_FILES,
    SECRET_KEYS,
    CredentialsProblemError,
    SecretName,
    pki_files,
    stale,
    superseded,
    version_folder,
)
from tests.support.apiserver import StubApiServer

CERT = b"-----BEGIN CERTIFICATE-----\nTUlJQ0VydGlmaWNhdGU=\n-----END CERTIFICATE-----"
KEY = b"-----BEGIN PRIVATE KEY-----\nU0VDUkVULUtFWS1CWVRFUw==\n-----END PRIVATE KEY-----\n"
SECRET = SecretName("vm-api-system", "migration-tls")
GOOD = {"ca.crt": CERT, "tls.crt": CERT, "tls.key": KEY}


# -- the pure part ---------------------------------------------------------------------------------


def test_the_secret_keys_are_a_tls_secrets_plus_the_ca_written_as_libvirts_pkipath_names() -> None:
    assert SECRET_KEYS == ("ca.crt", "tls.crt", "tls.key")
    assert PKI_FILES == ("cacert.pem", "clientcert.pem", "clientkey.pem")
    files = pki_files(SECRET, GOOD, host="h1")
    assert files == {
        "cacert.pem": CERT + b"\n",
        "clientcert.pem": CERT + b"\n",
        "clientkey.pem": KEY,
    }


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (
            {"ca.crt": CERT, "tls.crt": CERT},
            "Secret vm-api-system/migration-tls (--migration-secret) lacks tls.key "
            "(needed for qemu+tls; it has: ca.crt, tls.crt)",
        ),
        ({}, "lacks ca.crt, tls.crt, tls.key (needed for qemu+tls; it has: none)"),
        ({**GOOD, "ca.crt": b""}, "lacks ca.crt"),
        (
            {**GOOD, "tls.crt": b"SECRET-NOT-PEM"},
            "(--migration-secret)'s tls.crt (14 bytes) is not a PEM certificate",
        ),
        ({**GOOD, "tls.key": CERT}, "'s tls.key (74 bytes) is not a PEM private key"),
    ],
)
def test_a_secret_that_cannot_be_used_is_a_refusal_naming_the_key_never_its_value(
    data: dict[str, bytes], says: str
) -> None:
    with pytest.raises(CredentialsProblemError) as problem:
        pki_files(SECRET, data, host="h1")
    assert problem.value.reason == c.MIGRATION_REASON_CREDENTIALS_MISSING
    assert says in problem.value.message
    assert problem.value.message.startswith(
        "host h1 has no usable TLS client credentials to open the target's libvirtd with: "
    )
    assert problem.value.message.endswith(
        "; nothing was copied and the machine keeps running on host h1"
    )
    assert "SECRET" not in problem.value.message
    assert "TUlJ" not in problem.value.message


def test_the_files_are_written_again_when_the_secret_changed_or_a_file_is_gone() -> None:
    every = list(PKI_FILES)
    assert stale(None, "7", every)  # not written by this process yet
    assert stale("7", "8", every)  # the Secret changed
    assert stale("7", "7", every[:2])  # someone removed a file
    assert not stale("7", "7", every)
    assert not stale("7", "7", [*every, "unrelated.pem"])


# -- the shell -------------------------------------------------------------------------------------

SECRETS = "/api/v1/namespaces/vm-api-system/secrets"


@pytest.fixture
def server() -> Iterator[StubApiServer]:
    with StubApiServer(watch_hold=0.2) as stub:
        yield stub


def _put(server: StubApiServer, data: dict[str, bytes]) -> str:
    stored = server.put(
        f"{SECRETS}/migration-tls",
        {
            "type": "kubernetes.io/tls",
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        },
    )
    return str(stored["metadata"]["resourceVersion"])


def _shell(server: StubApiServer, folder: Path) -> MigrationCredentials:
    return MigrationCredentials(
        server.api_client(),
        host="h1",
        namespace="vm-api-system",
        secret="migration-tls",
        folder=folder,
    )


def test_the_shell_writes_the_pkipath_files_0600_and_rewrites_them_when_the_secret_changes(
    server: StubApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    folder = tmp_path / "pki"
    folder.mkdir()
    # What a daemon from before version subfolders left in the folder.
    (folder / "clientkey.pem").write_bytes(b"old")
    first = _put(server, GOOD)
    creds = _shell(server, folder)
    path = Path(creds.pkipath())
    assert path == folder / version_folder(first)
    assert [p.name for p in folder.iterdir()] == [path.name]
    assert sorted(p.name for p in path.iterdir()) == sorted(PKI_FILES)
    for name in PKI_FILES:
        assert stat.S_IMODE((path / name).stat().st_mode) == 0o600
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert (path / "clientkey.pem").read_bytes() == KEY
    inode = (path / "clientkey.pem").stat().st_ino
    # Unchanged: not written again.
    assert creds.pkipath() == str(path)
    assert (path / "clientkey.pem").stat().st_ino == inode
    # Rotated: a new subfolder, whole, before the next use; the one before it stays for a copy
    # that was handed its path just before, older ones go.
    rotated = KEY.replace(b"U0VD", b"TkVX")
    second = _put(server, {**GOOD, "tls.key": rotated})
    newer = Path(creds.pkipath())
    assert newer == folder / version_folder(second)
    assert (newer / "clientkey.pem").read_bytes() == rotated
    assert (path / "clientkey.pem").read_bytes() == KEY
    third = _put(server, GOOD)
    newest = Path(creds.pkipath())
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [version_folder(second), version_folder(third)]
    )
    # A file removed behind the daemon's back: the subfolder is made whole again.
    (newest / "cacert.pem").unlink()
    assert creds.pkipath() == str(newest)
    assert (newest / "cacert.pem").read_bytes() == CERT + b"\n"
    assert sorted(p.name for p in newest.iterdir()) == sorted(PKI_FILES)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [version_folder(second), version_folder(third)]
    )
    for value in ("U0VD", "TkVX", "TUlJ"):
        assert value not in caplog.text


def test_a_secret_version_names_a_safe_subfolder_and_only_older_ones_go() -> None:
    assert version_folder("12345") == "v-12345"
    assert version_folder("../a b") == "v-.._a_b"
    assert version_folder("") == "v-_"
    assert superseded(["v-1", "v-2", "v-3", ".new-x", "other"], current="v-3", previous="v-2") == [
        "v-1"
    ]
    assert superseded(["v-1", "v-3"], current="v-3", previous=None) == ["v-1"]


def test_the_shell_refuses_a_broken_secret_and_keeps_no_key_of_a_deleted_one(
    server: StubApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "pki"
    _put(server, GOOD)
    creds = _shell(server, folder)
    creds.pkipath()
    _put(server, {"ca.crt": CERT, "tls.crt": CERT})
    with pytest.raises(CredentialsProblemError) as problem:
        creds.pkipath()
    assert "Secret vm-api-system/migration-tls (--migration-secret) lacks tls.key" in (
        problem.value.message
    )
    server.fail("GET", f"{SECRETS}/migration-tls", 404)
    with pytest.raises(CredentialsProblemError) as problem:
        creds.pkipath()
    assert "Secret vm-api-system/migration-tls does not exist (--migration-secret)" in (
        problem.value.message
    )
    assert list(folder.iterdir()) == []
    assert "lacks tls.key" in caplog.text
    assert "TUlJ" not in caplog.text


@pytest.mark.parametrize(
    ("status", "refused", "says"),
    [
        (403, True, "Secret vm-api-system/migration-tls may not be read by the daemon"),
        (500, False, "reading Secret vm-api-system/migration-tls: 500"),
    ],
)
def test_the_shell_refuses_on_rbac_and_retries_an_api_server_error(
    server: StubApiServer, tmp_path: Path, status: int, refused: bool, says: str
) -> None:
    _put(server, GOOD)
    server.fail("GET", f"{SECRETS}/migration-tls", status)
    expected = CredentialsProblemError if refused else ProviderError
    with pytest.raises(expected) as problem:
        _shell(server, tmp_path / "pki").pkipath()
    assert says in str(problem.value)
