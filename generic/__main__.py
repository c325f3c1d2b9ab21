"""`python -m generic`: run the generic VirtualMachine controller alone against a cluster.

Useful for a provider developed in another process or language, and for this project's
integration tests. The daemon embeds the same controller through `generic.adapters.operator`.
"""

from __future__ import annotations

import argparse
import logging
import sys

import prometheus_client

from generic import constants as c
from generic.adapters.operator import run_standalone


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generic", description=__doc__)
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster or KUBECONFIG)")
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="namespace or glob pattern to serve (repeatable; default: all namespaces)",
    )
    parser.add_argument("--workers", type=int, default=4, help="reconcile threads (default 4)")
    parser.add_argument("--poll-interval", type=float, default=30.0)
    parser.add_argument(
        "--missing-provider-grace",
        type=float,
        default=c.MISSING_PROVIDER_GRACE_SECONDS,
        metavar="SECONDS",
        help="how long a new VM's provider object may be missing before the VM reports "
        f"NotAdopted (default {c.MISSING_PROVIDER_GRACE_SECONDS:g})",
    )
    parser.add_argument(
        "--metrics-port", type=int, default=0, help="serve Prometheus metrics (default: off)"
    )
    parser.add_argument("--metrics-address", default="127.0.0.1")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # kopf reports every handled event at INFO; the controller's own log says what matters.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if args.metrics_port:
        prometheus_client.start_http_server(args.metrics_port, addr=args.metrics_address)
    run_standalone(
        kubeconfig=args.kubeconfig,
        namespaces=args.namespace,
        workers=args.workers,
        poll_interval=args.poll_interval,
        missing_provider_grace=args.missing_provider_grace,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
