"""Names of the cached base images an http(s) LibvirtImage is imported into, and how an image's
URL may be shown.

Spelled once here because three parties must agree on them: the importer writes them, the resolver
points overlays at them, and the garbage collector may delete only volumes that carry exactly this
shape (`image-<32 hex>.<qcow2|raw>` and its marker `<that>.verified`). A name that merely resembles
it is not ours.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from catalog.image import ImageFormat

__all__ = [
    "CachedName",
    "base_volume_name",
    "image_base_name",
    "marker_name",
    "parse_cached_name",
    "shown_url",
]

_PREFIX = "image-"
_MARKER_SUFFIX = ".verified"
# The sha256 prefix keeps names short; 128 bits still never collide by accident.
_DIGEST_CHARS = 32
_CACHED = re.compile(r"^image-([0-9a-f]{32})\.(qcow2|raw)(\.verified)?$")


def base_volume_name(sha256: str, fmt: str) -> str:
    """The pool volume an image with this checksum and format is cached as."""
    return f"{_PREFIX}{sha256.lower()[:_DIGEST_CHARS]}.{fmt}"


def marker_name(volume: str) -> str:
    """The companion volume whose presence says `volume` was fully downloaded and verified."""
    return f"{volume}{_MARKER_SUFFIX}"


@dataclass(frozen=True)
class CachedName:
    base: str  # the base volume's name, also for a marker
    marker: bool


def parse_cached_name(name: str) -> CachedName | None:
    """The base a volume name belongs to, or None when the importer never makes such a name."""
    match = _CACHED.match(name)
    if match is None:
        return None
    marker = match.group(3) is not None
    return CachedName(base=name.removesuffix(_MARKER_SUFFIX) if marker else name, marker=marker)


def image_base_name(image: Mapping[str, Any]) -> str | None:
    """The cached base an http image resolves to; None for a pool-volume image (not imported)."""
    spec = image.get("spec")
    if not isinstance(spec, Mapping):
        return None
    source = spec.get("source")
    http = source.get("http") if isinstance(source, Mapping) else None
    if not isinstance(http, Mapping) or not isinstance(http.get("sha256"), str):
        return None
    return base_volume_name(http["sha256"], str(spec.get("format") or ImageFormat.QCOW2.value))


def shown_url(url: str) -> str:
    """`url` as logs, status and Events may show it: no user info, query or fragment, which may
    carry credentials (a pre-signed URL's token is in its query)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    hidden = "?…" if parts.query else ""
    return urlunsplit((parts.scheme, host, parts.path, "", "")) + hidden
