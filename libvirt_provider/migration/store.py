"""The Kubernetes side as a migration's pass needs it, and the key that names a migration.

`adapters.kube.migrations.MigrationApi` implements it; unit tests use an in-memory double.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["MigrationKey", "MigrationStore", "Obj"]

Obj = dict[str, Any]


@dataclass(frozen=True, order=True)
class MigrationKey:
    namespace: str
    name: str


class MigrationStore(Protocol):
    def get_migration(self, namespace: str, name: str) -> Obj | None:
        """The migration as the API server has it now; None when it does not exist."""
        ...

    def list_migrations(self) -> list[Obj]:
        """Every LibvirtMigration in the cluster, as the API server has them now (the limits
        count the running ones)."""
        ...

    def get_machine(self, namespace: str, name: str) -> Obj | None: ...
    def get_virtual_machine(self, namespace: str, name: str) -> Obj | None: ...
    def get_host(self, name: str) -> Obj | None:
        """The LibvirtHost `name`; None when there is none."""
        ...

    def list_hosts(self) -> list[Obj]:
        """Every LibvirtHost."""
        ...

    def heartbeats(self) -> dict[str, dt.datetime]:
        """The last renewal of each host's heartbeat Lease, by host name."""
        ...

    def patch_migration_status(self, obj: Obj, status: Obj) -> Obj:
        """Merge `status` into the migration's status; returns the object written."""
        ...

    def set_migration_finalizers(self, obj: Obj, finalizers: list[str]) -> Obj:
        """Set the finalizers if they are still what `obj` shows (StateConflictError if not)."""
        ...

    def patch_machine_status(self, obj: Obj, status: Obj, *, conditional: bool = False) -> Obj:
        """Merge `status` into the machine's status; with `conditional`, only if the machine is
        still at the resourceVersion `obj` shows (StateConflictError otherwise)."""
        ...

    def move_machine(self, obj: Obj, host: str) -> Obj:
        """Bind the machine to `host`: spec.host and the host label, in one write."""
        ...

    def event(self, obj: Any, *, reason: str, message: str, warning: bool = False) -> None:
        """An Event on `obj` (a migration or a machine, by its kind)."""
        ...
