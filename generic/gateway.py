"""What the reconciler needs from the cluster, as a Protocol, so its logic runs without one.

The real implementation is `generic.adapters.kube.KubeGateway`; unit tests use an in-memory
double. Every write that could race another writer carries the resourceVersion it was decided
on and raises `ConflictError` when the object moved on.

Reads may be served from watch-fed copies that lag the API server by an event or two; a caller
that is about to take something away asks for `fresh=True`, which reads the API server. A write
that fails with `ConflictError` refreshes the copy it was decided on, so the retry sees the news.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = ["ClusterGateway", "EventType", "ProviderKind"]

Obj = dict[str, Any]
EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True)
class ProviderKind:
    """A provider kind resolved through discovery."""

    group: str
    version: str
    kind: str
    plural: str
    watched: bool
    """True when its objects are watched (labelled CRD): status changes arrive as events."""


class ClusterGateway(Protocol):
    def get_vm(self, namespace: str, name: str, *, fresh: bool = False) -> Obj | None:
        """The VM, or None when it does not exist."""

    def resolve_kind(self, api_group: str, kind: str) -> ProviderKind:
        """The kind's preferred served version; raises KindNotServedError."""

    def get_provider(
        self, kind: ProviderKind, namespace: str, name: str, *, fresh: bool = False
    ) -> Obj | None:
        """The provider object, or None when it does not exist. Only its metadata and status
        are read (a copy may hold nothing else)."""

    def set_vm_finalizers(self, vm: Mapping[str, Any], finalizers: Sequence[str]) -> Obj:
        """Replace the VM's finalizers, guarded by its resourceVersion; returns the new VM."""

    def set_provider_owners(
        self, kind: ProviderKind, provider: Mapping[str, Any], owners: Sequence[Mapping[str, Any]]
    ) -> Obj:
        """Replace the provider's ownerReferences, guarded by its resourceVersion."""

    def delete_provider(self, kind: ProviderKind, provider: Mapping[str, Any]) -> None:
        """Request deletion, preconditioned on the uid and resourceVersion that were checked."""

    def patch_vm_status(self, vm: Mapping[str, Any], patch: Mapping[str, Any]) -> Obj:
        """Merge-patch the VM's status subresource."""

    def post_event(
        self, vm: Mapping[str, Any], *, type_: EventType, reason: str, message: str
    ) -> None:
        """Record a Kubernetes Event about the VM (best effort)."""
