"""The Kubernetes side as the machine loop needs it, and the key that names a machine.

`adapters.kube.KubeAdapter` implements it in production; unit tests use an in-memory double.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["EventSink", "MachineKey", "MachineStore", "Obj", "SecretData"]

Obj = dict[str, Any]


@dataclass(frozen=True)
class SecretData:
    """A Secret as read: its resourceVersion (equal versions, equal data) and its data, base64."""

    version: str
    data: dict[str, str]


@dataclass(frozen=True, order=True)
class MachineKey:
    namespace: str
    name: str


class EventSink(Protocol):
    def event(self, obj: Any, *, reason: str, message: str, warning: bool = False) -> None: ...


class MachineStore(EventSink, Protocol):
    def get_machine(self, namespace: str, name: str, *, fresh: bool = False) -> Obj | None:
        """The machine, from the watch-fed copy unless `fresh` (then from the API server)."""
        ...

    def get_virtual_machine(self, namespace: str, name: str) -> Obj | None: ...
    def list_cluster(self, plural: str) -> list[Obj]: ...
    def get_secret_data(self, namespace: str, name: str) -> SecretData | None:
        """The Secret's resourceVersion and base64-encoded data; None when it does not exist.
        Raises AccessDeniedError where the daemon may not read Secrets."""
        ...

    def patch_machine_status(self, namespace: str, name: str, status: Obj) -> None: ...
    def machine_uid(self, namespace: str, name: str) -> str | None:
        """The uid of the LibvirtMachine as the API server has it now (any host's), None when it
        does not exist; read without keeping a copy."""
        ...

    def address_claims(self, *, machine_uid: str | None = None) -> list[Obj]:
        """This provider's IPAddress claims (`constants.ADDRESS_MANAGER`), of one machine when
        `machine_uid` is given."""
        ...

    def create_address_claim(self, body: Obj) -> Obj:
        """Create the IPAddress; raises StateConflictError when its name (the address) is taken."""
        ...

    def delete_address_claim(self, name: str, *, uid: str) -> None:
        """Delete the IPAddress if it is still the object with `uid`; nothing when it is gone
        (or is another object by now)."""
        ...

    def set_finalizers(self, obj: Obj, finalizers: list[str], *, host: str | None = None) -> None:
        """Set the machine's finalizers (and `spec.host`, when given) if its finalizers are still
        what `obj` shows; raises StateConflictError when they are not."""
        ...
