"""An in-memory `MachineStore`: the Kubernetes side of the machine loop for unit tests."""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from libvirt_provider.constants import CLAIM_MACHINE_UID_LABEL
from libvirt_provider.errors import AccessDeniedError, NotFoundError, StateConflictError
from libvirt_provider.machine.store import SecretData

Obj = dict[str, Any]


@dataclass
class MemoryStore:
    machines: dict[str, Obj] = field(default_factory=dict)
    vms: dict[str, Obj] = field(default_factory=dict)
    catalog: dict[str, list[Obj]] = field(default_factory=dict)
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)
    # Namespaces whose Secrets the daemon may not read (not opted in by a RoleBinding).
    secrets_forbidden_in: set[str] = field(default_factory=set)
    secret_reads: int = 0
    events: list[tuple[str, str, str]] = field(default_factory=list)

    # Reads the reconciler asked to be fresh (from the API server, in production).
    fresh_reads: int = 0
    # IPAddress claims by name (the address), as the API server keeps them.
    claims: dict[str, Obj] = field(default_factory=dict)
    claim_serial: int = 0

    def get_machine(self, namespace: str, name: str, *, fresh: bool = False) -> Obj | None:
        self.fresh_reads += fresh
        obj = self.machines.get(name)
        return copy.deepcopy(obj) if obj else None

    def get_virtual_machine(self, namespace: str, name: str) -> Obj | None:
        obj = self.vms.get(name)
        return copy.deepcopy(obj) if obj else None

    def list_cluster(self, plural: str) -> list[Obj]:
        return copy.deepcopy(self.catalog.get(plural, []))

    def get_secret_data(self, namespace: str, name: str) -> SecretData | None:
        self.secret_reads += 1
        if namespace in self.secrets_forbidden_in:
            raise AccessDeniedError(f"reading Secret {name!r} in namespace {namespace!r}")
        data = self.secrets.get(name)
        if data is None:
            return None
        # A version that changes with the content, as the API server's resourceVersion does.
        version = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
        return SecretData(version=version, data=dict(data))

    def machine_uid(self, namespace: str, name: str) -> str | None:
        obj = self.machines.get(name)
        return str(obj["metadata"].get("uid")) if obj else None

    def address_claims(self, *, machine_uid: str | None = None) -> list[Obj]:
        return [
            copy.deepcopy(claim)
            for claim in self.claims.values()
            if machine_uid is None
            or claim["metadata"]["labels"].get(CLAIM_MACHINE_UID_LABEL) == machine_uid
        ]

    def create_address_claim(self, body: Obj) -> Obj:
        name = body["metadata"]["name"]
        if name in self.claims:
            raise StateConflictError(f'ipaddresses "{name}" already exists')
        self.claim_serial += 1
        claim = copy.deepcopy(body)
        claim["metadata"]["uid"] = f"claim-{self.claim_serial}"
        self.claims[name] = claim
        return copy.deepcopy(claim)

    def delete_address_claim(self, name: str, *, uid: str) -> None:
        claim = self.claims.get(name)
        if claim is not None and claim["metadata"]["uid"] == uid:
            del self.claims[name]

    def patch_machine_status(self, namespace: str, name: str, status: Obj) -> None:
        _apply_merge_patch(self.machines[name].setdefault("status", {}), status)

    def set_finalizers(self, obj: Obj, finalizers: list[str], *, host: str | None = None) -> None:
        name = obj["metadata"]["name"]
        if name not in self.machines:
            raise NotFoundError(f"LibvirtMachine {name} not found")
        if self.machines[name]["metadata"].get("finalizers") != obj["metadata"].get("finalizers"):
            raise StateConflictError(f"LibvirtMachine {name}: finalizers changed")
        obj = self.machines[name]
        obj["metadata"]["finalizers"] = finalizers
        if host is not None:
            obj.setdefault("spec", {})["host"] = host
        if obj["metadata"].get("deletionTimestamp") and not finalizers:
            del self.machines[name]

    def event(self, obj: Obj, *, reason: str, message: str, warning: bool = False) -> None:
        self.events.append((obj["kind"], reason, message))


def _apply_merge_patch(target: Obj, patch: Obj) -> None:
    """What the API server does with a JSON merge patch (RFC 7386): maps merge at every depth."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _apply_merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
