"""Storage volume XML for the volumes the provider creates (pure; no libvirt calls)."""

from __future__ import annotations

from lxml import etree
from lxml.builder import E

from libvirt_provider.driver.types import OverlaySpec

__all__ = ["render_blank_volume", "render_overlay_volume"]


def render_overlay_volume(spec: OverlaySpec) -> str:
    """A qcow2 volume backed by `spec.backing_path`, with the backing format stated explicitly.

    Naming the backing format matters: without it qemu would probe the base image's format, which
    is both slow and unsafe (a raw image could claim to be qcow2 and point at host files).
    """
    volume = E.volume(
        E.name(spec.name),
        E.capacity(str(spec.capacity_bytes), unit="bytes"),
        E.target(E.format(type="qcow2")),
        E.backingStore(E.path(spec.backing_path), E.format(type=spec.backing_format)),
    )
    return str(etree.tostring(volume, encoding="unicode"))


def render_blank_volume(*, name: str, capacity_bytes: int, format: str) -> str:
    """An empty volume; qcow2 allocates lazily, raw is sparse in a directory pool."""
    volume = E.volume(
        E.name(name),
        E.capacity(str(capacity_bytes), unit="bytes"),
        E.allocation("0", unit="bytes"),
        E.target(E.format(type=format)),
    )
    return str(etree.tostring(volume, encoding="unicode"))
