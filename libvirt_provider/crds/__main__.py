"""`python -m libvirt_provider.crds`: rewrite `crds/infrastructure.vm-api.io_<plural>.yaml`.

With `--check` it only fails when a committed file differs from what the models produce.
"""

from __future__ import annotations

import argparse
import sys

from generic.crdgen import write_if_changed
from libvirt_provider.crds import CRDS, crd_path, crd_yaml

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m libvirt_provider.crds", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for spec in CRDS:
        path, text = crd_path(spec), crd_yaml(spec)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path)
        elif write_if_changed(path, text):
            print(f"wrote {path}")
    for path in stale:
        print(f"{path} is out of date: run python -m libvirt_provider.crds", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
