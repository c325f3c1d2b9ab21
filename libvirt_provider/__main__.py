"""Command line of the provider daemon (`libvirt-provider`, `python -m libvirt_provider`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="libvirt-provider",
        description=(
            "libvirt provider for the vm-api.io VirtualMachine API, with the generic controller "
            "embedded. Runs one daemon per KVM host."
        ),
    )
    parser.add_argument(
        "--kubeconfig",
        help="kubeconfig to use; defaults to in-cluster configuration, then $KUBECONFIG",
    )
    parser.add_argument(
        "--libvirt-uri",
        help="libvirt connection URI; defaults to $LIBVIRT_DEFAULT_URI, then qemu:///system",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help()
    print(
        "\nThe controllers are not wired in yet; this build only prints its help.", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
