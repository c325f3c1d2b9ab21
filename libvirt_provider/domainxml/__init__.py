"""The domain XML renderer: a pure function from a resolved `DomainSpec` to libvirt domain XML.

Split by area, one small module each (`compute`, `firmware`, `disks`, `nics`, `cloudinit`,
`console`, `metadata`), assembled in `domain`. It
builds the tree with lxml, never by string concatenation, so every value is escaped by
construction. It refuses to invent anything libvirt
knows better: no PCI addresses, no firmware paths, no emulator path. libvirt fills those in.
"""

from __future__ import annotations

from libvirt_provider.domainxml.domain import render_domain, render_domain_xml

__all__ = [
    "render_domain",
    "render_domain_xml",
]
