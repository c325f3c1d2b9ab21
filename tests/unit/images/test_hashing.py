"""The background checksum equals hashlib's, whatever the chunking."""

from __future__ import annotations

import hashlib

from libvirt_provider.images.digest import BackgroundDigest


def test_the_background_digest_matches_a_plain_one() -> None:
    data = bytes(range(256)) * 5000
    digest = BackgroundDigest()
    for i in range(0, len(data), 4099):
        digest.update(data[i : i + 4099])
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()  # asking twice is fine


def test_closing_early_stops_the_thread() -> None:
    digest = BackgroundDigest()
    digest.update(b"partial")
    digest.close()
    digest.close()
    assert digest.hexdigest() == hashlib.sha256(b"partial").hexdigest()
