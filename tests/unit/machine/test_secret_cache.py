"""The cloud-init Secrets as the machine passes read them (issue 24, item 9): by `get` of the named
Secret only, reused by the passes that only wait, kept decoded by resourceVersion so an unchanged
Secret is neither decoded nor hashed again. The clock is injected."""

from __future__ import annotations

import base64
import hashlib

import pytest
from pydantic import SecretBytes

from libvirt_provider.errors import AccessDeniedError
from libvirt_provider.machine.inputs import SECRET_REREAD_SECONDS, SecretCache
from libvirt_provider.resolve.cloudinit import cloud_init_digest, instance_id
from libvirt_provider.resolved import CloudInitData
from tests.doubles.store import MemoryStore

MB = 1024 * 1024
EDIT = ("uid", 1, "", "")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def secret(text: bytes) -> dict[str, str]:
    return {"user-data": base64.b64encode(text).decode()}


def cache(store: MemoryStore, clock: Clock, **kw: int) -> SecretCache:
    return SecretCache(store, clock=clock, **kw)


def test_passes_that_only_wait_reuse_the_read_until_it_is_a_while_old() -> None:
    store, clock = MemoryStore(), Clock()
    store.secrets["ci"] = secret(b"#cloud-config\n")
    secrets = cache(store, clock)
    first = secrets.data("ns", "ci", EDIT)
    assert first == {"user-data": b"#cloud-config\n"}
    clock.now += SECRET_REREAD_SECONDS - 1
    assert secrets.data("ns", "ci", EDIT) is first
    assert store.secret_reads == 1
    clock.now += 1
    assert secrets.data("ns", "ci", EDIT) is first  # read again: the same version, same objects
    assert store.secret_reads == 2


def test_an_edit_of_the_pair_reads_the_secret_at_once() -> None:
    store, clock = MemoryStore(), Clock()
    store.secrets["ci"] = secret(b"v1")
    secrets = cache(store, clock)
    secrets.data("ns", "ci", EDIT)
    store.secrets["ci"] = secret(b"v2")
    assert secrets.data("ns", "ci", EDIT) == {"user-data": b"v1"}  # a waiting pass: not read
    assert secrets.data("ns", "ci", ("uid", 1, "touched", "")) == {"user-data": b"v2"}
    assert store.secret_reads == 2


def test_a_missing_or_unreadable_secret_is_not_remembered() -> None:
    store, clock = MemoryStore(), Clock()
    secrets = cache(store, clock)
    assert secrets.data("ns", "ci", EDIT) is None
    store.secrets["ci"] = secret(b"now here")
    assert secrets.data("ns", "ci", EDIT) == {"user-data": b"now here"}
    store.secrets_forbidden_in.add("ns")
    clock.now += SECRET_REREAD_SECONDS
    with pytest.raises(AccessDeniedError):
        secrets.data("ns", "ci", EDIT)
    with pytest.raises(AccessDeniedError):  # not served from before the refusal
        secrets.data("ns", "ci", EDIT)


def test_the_decoded_data_kept_is_bounded() -> None:
    store, clock = MemoryStore(), Clock()
    for name in ("a", "b", "c"):
        store.secrets[name] = secret(name.encode() * MB)
    secrets = cache(store, clock, max_bytes=2 * MB)
    for name in ("a", "b", "c"):
        secrets.data("ns", name, EDIT)
    assert store.secret_reads == 3
    secrets.data("ns", "c", EDIT)
    secrets.data("ns", "b", EDIT)
    assert store.secret_reads == 3
    secrets.data("ns", "a", EDIT)  # the least recently used went
    assert store.secret_reads == 4


def test_the_digests_of_unchanged_contents_are_remembered_and_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    user = b"#cloud-config\n" + b"x" * MB
    ident = instance_id("uid", hostname="web", ssh_public_keys=(), user_data=user,
                        network_config=None)  # fmt: skip
    seed = CloudInitData(
        instance_id=ident, hostname="web", user_data=SecretBytes(user), pool="p", volume="v"
    )
    digest = cloud_init_digest(seed, key="uid")
    hashed: list[int] = []
    real = hashlib.sha256

    def counted() -> hashlib._Hash:
        hashed.append(1)
        return real()

    monkeypatch.setattr(hashlib, "sha256", counted)
    assert instance_id("uid", hostname="web", ssh_public_keys=(), user_data=user,
                       network_config=None) == ident  # fmt: skip
    assert cloud_init_digest(seed, key="uid") == digest
    assert hashed == []
    # Equal contents in another object: found by comparison, the same id for the guest.
    again = bytes(bytearray(user))
    assert instance_id("uid", hostname="web", ssh_public_keys=(), user_data=again,
                       network_config=None) == ident  # fmt: skip
    changed = b"#cloud-config\n" + b"y" * MB
    assert instance_id("uid", hostname="web", ssh_public_keys=(), user_data=changed,
                       network_config=None) != ident  # fmt: skip
    assert len(hashed) == 1  # only the changed contents
