"""The Kubernetes side as the restore loop needs it (`adapters.kube.restores.RestoreApi`; unit
tests use an in-memory double), and the key that names a restore."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from libvirt_provider.snapshot.store import Obj

__all__ = ["RestoreKey", "RestoreStore"]


@dataclass(frozen=True, order=True)
class RestoreKey:
    namespace: str
    name: str


class RestoreStore(Protocol):
    def get_restore(self, namespace: str, name: str) -> Obj | None: ...
    def get_snapshot(self, namespace: str, name: str) -> Obj | None: ...
    def get_virtual_machine(self, namespace: str, name: str) -> Obj | None: ...
    def get_machine(self, namespace: str, name: str) -> Obj | None: ...
    def patch_restore_status(self, obj: Obj, status: Obj, *, conditional: bool) -> Obj:
        """Write the status; with `conditional`, only if the object is still at the
        resourceVersion `obj` shows (StateConflictError otherwise)."""
        ...

    def set_restore_finalizers(self, obj: Obj, finalizers: list[str]) -> Obj:
        """Set the finalizers if they are still what `obj` shows (StateConflictError if not)."""
        ...

    def patch_machine_status(self, machine: Obj, patch: Obj) -> Obj:
        """Merge `patch` into the LibvirtMachine's status if it is still at the resourceVersion
        `machine` shows (StateConflictError otherwise): two restores never both hold it."""
        ...

    def event(self, obj: Any, *, reason: str, message: str, warning: bool = False) -> None:
        """An Event on the restore."""
        ...

    def machine_event(self, machine: Obj, *, reason: str, message: str) -> None:
        """An Event on the LibvirtMachine."""
        ...
