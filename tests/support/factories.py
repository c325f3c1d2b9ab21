"""The bodies e2e tests and benchmarks create: linked pairs (a VirtualMachine and its
LibvirtMachine) pinned, unplaced or on the remote host, and stub provider CRDs.

Why a module of its own: the pair comes from deploy/samples/vm.yaml, so that tests exercise what a
user applies; every variation (a host, none, the remote host) starts from that one copy. Catalog
objects for unit tests are in `builders`.
"""

from __future__ import annotations

from typing import Any

import yaml

from generic.constants import PROVIDER_CRD_LABEL, PROVIDER_CRD_LABEL_VALUE
from libvirt_provider.constants import HOST_LABEL
from tests.support.lab_access import REPO, LabRemote

# The host the provider tests' daemon runs as; `pair` pins machines to it.
HOST = "e2e-host"


def pair(ns: str, name: str, *, vm_spec: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    docs = list(yaml.safe_load_all((REPO / "deploy" / "samples" / "vm.yaml").read_text()))
    vm, lm = docs
    for doc in docs:
        doc["metadata"]["namespace"] = ns
        doc["metadata"]["name"] = name
    vm["spec"]["infrastructureRef"]["name"] = name
    vm["spec"].update(vm_spec or {})
    lm["metadata"]["annotations"]["vm-api.io/virtual-machine"] = name
    lm["metadata"].setdefault("labels", {})["infrastructure.vm-api.io/host"] = HOST
    lm["spec"]["host"] = HOST
    return docs


def unplaced(
    ns: str,
    name: str,
    *,
    vm_spec: dict[str, Any] | None = None,
    lm_spec: dict[str, Any] | None = None,
    running: bool = False,
) -> list[dict[str, Any]]:
    """A linked pair with no host: placement chooses one. Powered off unless `running` (a
    placed machine is still built: volumes and a defined domain, without a guest to run)."""
    spec = {"powerState": "PoweredOn" if running else "PoweredOff", **(vm_spec or {})}
    vm, lm = pair(ns, name, vm_spec=spec)
    lm["metadata"].get("labels", {}).pop(HOST_LABEL, None)
    lm["spec"].pop("host", None)
    lm["spec"].update(lm_spec or {})
    return [vm, lm]


def remote_pair(ns: str, name: str, remote: LabRemote, **vm_spec: Any) -> list[dict[str, Any]]:
    """A linked pair pinned to the remote host."""
    vm, lm = pair(ns, name, vm_spec=vm_spec or None)
    lm["metadata"].setdefault("labels", {})[HOST_LABEL] = remote.name
    lm["spec"]["host"] = remote.name
    return [vm, lm]


def stub_crd(group: str, *, kind: str = "StubMachine", labelled: bool = True) -> dict[str, Any]:
    """A provider kind with no controller behind it (tests write its status), labelled as a
    provider CRD unless told not to be."""
    plural = kind.lower() + "s"
    metadata: dict[str, Any] = {"name": f"{plural}.{group}"}
    if labelled:
        metadata["labels"] = {PROVIDER_CRD_LABEL: PROVIDER_CRD_LABEL_VALUE}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
