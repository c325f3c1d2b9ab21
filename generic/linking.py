"""Whether a generic VM may control a provider object: the mutual link and ownership checks.

A reference alone never authorises anything (contract.md section 3): the provider object must be
in the VM's namespace, carry the annotation naming the VM, and have no other controller. Only
then does the VM adopt it (a controller owner reference) and, on deletion, delete it.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from generic import constants as c
from generic.formats import parse_time

__all__ = [
    "Link",
    "LinkAssessment",
    "adopted_owner_references",
    "assess_link",
    "awaiting_creation",
    "describe_ref",
    "disowned_owner_references",
]


class Link(enum.Enum):
    """How a provider object relates to the VM that references it."""

    KIND_NOT_SERVED = "kind-not-served"
    MISSING = "missing"
    NOT_LINKED_BACK = "not-linked-back"
    FOREIGN_CONTROLLER = "foreign-controller"
    LINKED = "linked"
    """Mutually linked and not controlled by anyone yet: ready to adopt."""
    ADOPTED = "adopted"
    """Mutually linked and controlled by this VM."""

    @property
    def mutual(self) -> bool:
        return self in (Link.LINKED, Link.ADOPTED)


@dataclass(frozen=True)
class LinkAssessment:
    link: Link
    message: str


def describe_ref(ref: Mapping[str, Any]) -> str:
    """`Kind name (group)`, for messages."""
    return f"{ref.get('kind')} {ref.get('name')!r} ({ref.get('apiGroup')})"


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _controller(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = meta.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def assess_link(vm: Mapping[str, Any], provider: Mapping[str, Any] | None) -> LinkAssessment:
    """Classify `provider` (None when it does not exist) from the point of view of `vm`."""
    vm_meta = _metadata(vm)
    ref = vm.get("spec", {}).get("infrastructureRef", {})
    what = describe_ref(ref)
    namespace = vm_meta.get("namespace")
    if provider is None:
        return LinkAssessment(
            Link.MISSING, f"provider object {what} does not exist in namespace {namespace!r}"
        )
    meta = _metadata(provider)
    if meta.get("namespace") != namespace:
        return LinkAssessment(
            Link.NOT_LINKED_BACK, f"provider object {what} is not in namespace {namespace!r}"
        )
    annotations = meta.get("annotations")
    backlink = annotations.get(c.LINK_ANNOTATION) if isinstance(annotations, dict) else None
    if backlink is None:
        return LinkAssessment(
            Link.NOT_LINKED_BACK,
            f"provider object {what} does not link back: annotation {c.LINK_ANNOTATION} is missing",
        )
    if backlink != vm_meta.get("name"):
        return LinkAssessment(
            Link.NOT_LINKED_BACK,
            f"provider object {what} links to VirtualMachine {backlink!r}, not to this one",
        )
    controller = _controller(meta)
    if controller is None:
        return LinkAssessment(Link.LINKED, f"provider object {what} links back; adopting it")
    if controller.get("uid") == vm_meta.get("uid"):
        return LinkAssessment(Link.ADOPTED, f"provider object {what} is adopted")
    holder = f"{controller.get('kind')} {controller.get('name')!r}"
    return LinkAssessment(
        Link.FOREIGN_CONTROLLER, f"provider object {what} is already controlled by {holder}"
    )


def awaiting_creation(
    vm: Mapping[str, Any],
    assessment: LinkAssessment,
    now: dt.datetime,
    *,
    grace: float = c.MISSING_PROVIDER_GRACE_SECONDS,
) -> float | None:
    """Seconds left for a new VM's missing provider object to appear before that is reported as
    a problem (`grace` seconds from the VM's creation); None when it is not missing, or the VM
    is older (or its age unknown)."""
    if assessment.link is not Link.MISSING:
        return None
    created = parse_time(_metadata(vm).get("creationTimestamp"))
    if created is None:
        return None
    left = grace - (now - created).total_seconds()
    return left if left > 0 else None


def adopted_owner_references(
    vm: Mapping[str, Any], provider: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The provider's owner references with this VM as controller (other owners kept)."""
    vm_meta = _metadata(vm)
    existing: Sequence[Any] = _metadata(provider).get("ownerReferences") or []
    kept = [dict(r) for r in existing if isinstance(r, dict) and r.get("uid") != vm_meta["uid"]]
    return [
        *kept,
        {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "name": vm_meta["name"],
            "uid": vm_meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        },
    ]


def disowned_owner_references(
    vm: Mapping[str, Any], provider: Mapping[str, Any]
) -> list[dict[str, Any]] | None:
    """The provider's owner references without this VM, or None if it holds none.

    A VM whose link was broken must let go: otherwise the garbage collector would delete the
    provider object together with the VM, although it no longer links back.
    """
    uid = _metadata(vm).get("uid")
    existing: Sequence[Any] = _metadata(provider).get("ownerReferences") or []
    kept = [dict(r) for r in existing if isinstance(r, dict) and r.get("uid") != uid]
    return kept if len(kept) != len(existing) else None
