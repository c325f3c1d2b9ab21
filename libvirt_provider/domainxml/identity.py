"""The `<domain>` element itself: domain type, name and UUID, and the fixed clock and lifecycle.

libvirt changes none of the three on a running domain, so a difference in any of them waits for
the next power cycle. The clock and the lifecycle actions are the provider's policy, the same for
every domain: they are written, never read back.
"""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from libvirt_provider.domainxml.changes import Change, Compared, Setting, compare
from libvirt_provider.resolved import DomainSpec

__all__ = [
    "IdentityFacts",
    "compare_identity",
    "parse_identity",
    "render_identity",
    "render_lifecycle",
]


@dataclass(frozen=True)
class IdentityFacts:
    name: str | None
    uuid: str | None
    domain_type: str | None


def render_identity(spec: DomainSpec) -> etree._Element:
    """The document's root, carrying the domain type, name and UUID."""
    domain = etree.Element("domain", type=spec.domain_type.value)
    etree.SubElement(domain, "name").text = spec.name
    etree.SubElement(domain, "uuid").text = str(spec.uuid)
    return domain


def render_lifecycle(domain: etree._Element) -> None:
    etree.SubElement(domain, "clock", offset="utc")
    # Power-off and crash end the domain; the controller decides what happens next, not libvirt.
    etree.SubElement(domain, "on_poweroff").text = "destroy"
    etree.SubElement(domain, "on_reboot").text = "restart"
    etree.SubElement(domain, "on_crash").text = "destroy"


def parse_identity(root: etree._Element) -> IdentityFacts:
    return IdentityFacts(
        name=root.findtext("name"),
        uuid=(root.findtext("uuid") or "").lower() or None,
        domain_type=root.get("type"),
    )


_COMPARED: tuple[Compared[IdentityFacts], ...] = (
    Compared(Setting.DOMAIN_NAME, lambda f: f.name),
    Compared(Setting.UUID, lambda f: f.uuid),
    Compared(Setting.DOMAIN_TYPE, lambda f: f.domain_type),
)


def compare_identity(desired: IdentityFacts, observed: IdentityFacts) -> list[Change]:
    return compare(desired, observed, _COMPARED)
