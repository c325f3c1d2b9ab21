"""The VirtualMachine CRD: its names, printer columns and schema, built from `generic.api`.

`python -m generic.crd` rewrites `crds/vm-api.io_virtualmachines.yaml`; `--check` exits non-zero
when the committed file differs from what the models produce.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from generic import constants as c
from generic.api import VirtualMachineSpec, VirtualMachineStatus
from generic.crdgen import CrdSpec, PrinterColumn, build_crd, render_yaml, write_if_changed

__all__ = ["CRD_PATH", "VIRTUAL_MACHINE", "main", "virtual_machine_crd", "virtual_machine_yaml"]

CRD_PATH = Path(__file__).resolve().parents[1] / "crds" / f"{c.GROUP}_{c.PLURAL}.yaml"

_READY = f'.status.conditions[?(@.type=="{c.CONDITION_READY}")]'

VIRTUAL_MACHINE = CrdSpec(
    group=c.GROUP,
    version=c.VERSION,
    kind=c.KIND,
    plural=c.PLURAL,
    singular=c.SINGULAR,
    description=(
        "A portable virtual machine. spec.infrastructureRef names a provider object in the same "
        "namespace that realises it on a platform; the generic controller adopts that object "
        "and mirrors its status here."
    ),
    spec_model=VirtualMachineSpec,
    status_model=VirtualMachineStatus,
    short_names=c.SHORT_NAMES,
    categories=(c.CATEGORY,),
    printer_columns=(
        PrinterColumn("Power", ".status.powerState", description="Observed power state"),
        PrinterColumn("Ready", f"{_READY}.status", description="Ready condition"),
        PrinterColumn("Reason", f"{_READY}.reason", description="Why the VM is (not) ready"),
        PrinterColumn("Provider-ID", ".status.providerID", priority=1),
        PrinterColumn(
            "Primary-IP",
            f'.status.addresses[?(@.type=="{c.ADDRESS_INTERNAL_IP}")].address',
            description="First InternalIP address",
            priority=1,
        ),
    ),
)


def virtual_machine_crd() -> dict[str, Any]:
    """The VirtualMachine CRD as a dict."""
    return build_crd(VIRTUAL_MACHINE)


def virtual_machine_yaml() -> str:
    """The VirtualMachine CRD as the YAML text committed in `crds/`."""
    return render_yaml(virtual_machine_crd(), generator_module="generic.crd")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generic.crd", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the file is out of date")
    parser.add_argument("--output", type=Path, default=CRD_PATH)
    args = parser.parse_args(argv)
    text = virtual_machine_yaml()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python -m generic.crd", file=sys.stderr)
            return 1
        return 0
    if write_if_changed(args.output, text):
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
