"""The Kubernetes side as the snapshot loop needs it, and the key that names a snapshot.

`adapters.kube.snapshots.SnapshotApi` implements it; unit tests use an in-memory double.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Obj", "SnapshotKey", "SnapshotStore"]

Obj = dict[str, Any]


@dataclass(frozen=True, order=True)
class SnapshotKey:
    namespace: str
    name: str


class SnapshotStore(Protocol):
    def get_snapshot(self, namespace: str, name: str) -> Obj | None:
        """The snapshot as the API server has it now; None when it does not exist."""
        ...

    def get_virtual_machine(self, namespace: str, name: str) -> Obj | None: ...
    def get_machine(self, namespace: str, name: str) -> Obj | None: ...
    def patch_snapshot_status(self, obj: Obj, status: Obj, *, conditional: bool) -> Obj:
        """Write the status; with `conditional`, only if the object is still at the
        resourceVersion `obj` shows (StateConflictError otherwise). Returns the object written."""
        ...

    def set_snapshot_finalizers(self, obj: Obj, finalizers: list[str]) -> Obj:
        """Set the finalizers if they are still what `obj` shows (StateConflictError if not)."""
        ...

    def event(self, obj: Any, *, reason: str, message: str, warning: bool = False) -> None: ...
