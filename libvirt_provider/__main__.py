"""Command line of the provider daemon (`libvirt-provider`, `python -m libvirt_provider`)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence

from generic import constants as vmapi
from libvirt_provider import constants as c
from libvirt_provider.adapters.process.daemon import DaemonConfig, default_host, run
from libvirt_provider.adapters.process.health import READINESS_INTERVAL
from libvirt_provider.adapters.process.startup import (
    ConfigError,
    PathFlags,
    check_config,
    check_host_name,
)
from libvirt_provider.console.hop import format_hop_address, parse_hop_address
from libvirt_provider.migration.limits import MigrationLimits


def _positive_seconds(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a number of seconds above 0")
    return value


def _heartbeat_grace(text: str) -> float:
    value = float(text)
    if value < c.HEARTBEAT_GRACE_MIN_SECONDS:
        raise argparse.ArgumentTypeError(
            f"must be at least {c.HEARTBEAT_GRACE_MIN_SECONDS:g} seconds (the heartbeat is "
            "renewed every quarter of it)"
        )
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a whole number above 0")
    return value


def _seconds_or_off(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be a number of seconds (0: off)")
    return value


def _byte_count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be a number of bytes (0: none)")
    return value


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
        default=os.environ.get("KUBECONFIG"),
        help="kubeconfig to use; default $KUBECONFIG, else in-cluster configuration",
    )
    parser.add_argument(
        "--libvirt-uri",
        default=os.environ.get("LIBVIRT_DEFAULT_URI", "qemu:///system"),
        help="libvirt connection URI; default $LIBVIRT_DEFAULT_URI, else qemu:///system",
    )
    parser.add_argument(
        "--host",
        help="this host's name, matched against the infrastructure.vm-api.io/host label of "
        "LibvirtMachines; default $NODE_NAME, else the hostname",
    )
    parser.add_argument(
        "--remote",
        action="store_true",
        help="remote mode: serve the LibvirtHosts that have spec.connection (each claimed by one "
        "replica at a time through its Lease) instead of this machine's libvirtd; --libvirt-uri "
        "and --host are not used",
    )
    parser.add_argument(
        "--identity",
        default=os.environ.get("POD_NAME"),
        help="this replica's name in remote hosts' Leases; default $POD_NAME, else hostname-pid",
    )
    parser.add_argument(
        "--credentials-dir",
        default=None,
        metavar="DIR",
        help="where remote hosts' credentials are written (0600 files in a 0700 directory of "
        "this process, removed at stop); default: $XDG_RUNTIME_DIR or /dev/shm (a tmpfs). "
        "qemu+ssh runs a wrapper script from there, so it must allow running programs",
    )
    parser.add_argument(
        "--domain-types",
        help="comma-separated domain types this host may offer (kvm, qemu); default: whatever "
        "libvirt's capabilities list. Use 'qemu' where /dev/kvm exists but cannot run guests",
    )
    parser.add_argument(
        "--health-address", default="0.0.0.0", help="address of /healthz and /readyz (the probes)"
    )
    parser.add_argument("--health-port", type=int, default=9440, help="port of the probes")
    parser.add_argument(
        "--metrics-address",
        default="127.0.0.1",
        help="address of /metrics (default loopback: docs/security.md); when it is "
        "--health-address too, /metrics is served beside the probes on --health-port",
    )
    parser.add_argument("--metrics-port", type=int, default=9441, help="port of /metrics")
    parser.add_argument(
        "--no-generic",
        action="store_true",
        help="do not run the embedded generic VirtualMachine controller",
    )
    parser.add_argument(
        "--generic-namespace",
        action="append",
        default=[],
        metavar="PATTERN",
        help="namespace (glob; repeatable) the embedded generic controller serves; default: all",
    )
    parser.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE", "kube-system"),
        help="namespace of the Lease that elects the daemon running the generic controller",
    )
    parser.add_argument(
        "--console-port",
        type=int,
        default=None,
        help="TLS port of the console subresources (the aggregated API endpoint the APIService "
        "subresources.infrastructure.vm-api.io names, docs/console.md); default: not served",
    )
    parser.add_argument(
        "--console-address", default="0.0.0.0", help="address of the console subresources"
    )
    parser.add_argument(
        "--console-cert-file",
        default=None,
        metavar="FILE",
        help="PEM serving certificate of the console subresources (the APIService's caBundle "
        "must verify it for <service>.<namespace>.svc); required with --console-port",
    )
    parser.add_argument(
        "--console-key-file",
        default=None,
        metavar="FILE",
        help="PEM private key of --console-cert-file",
    )
    parser.add_argument(
        "--console-hop-port",
        type=int,
        default=None,
        help="TLS port on which this daemon takes requests other daemons forward to it for the "
        'machines of its hosts (mutual TLS, docs/console.md "Routing"); with it, this daemon '
        "also forwards requests for other hosts' machines; default: no hops",
    )
    parser.add_argument(
        "--console-hop-ca-file",
        default=None,
        metavar="FILE",
        help="PEM CA that signed every daemon's --console-cert-file: a hop's peer must present a "
        f"certificate from it naming {c.HOP_PEER_NAME}; required with --console-hop-port",
    )
    parser.add_argument(
        "--console-advertise-address",
        default=os.environ.get("POD_IP", ""),
        metavar="IP",
        help="IP address other daemons dial for hops, published with --console-hop-port in "
        "this daemon's hosts' heartbeat Leases (default: $POD_IP, the downward API's pod IP)",
    )
    parser.add_argument(
        "--console-replay-bytes",
        type=_byte_count,
        default=c.CONSOLE_REPLAY_BYTES,
        metavar="BYTES",
        help="bytes of a console's last output replayed to each session on attach "
        "(default %(default)s; 0: no replay)",
    )
    parser.add_argument(
        "--console-idle-timeout",
        type=_seconds_or_off,
        default=c.CONSOLE_WRITER_IDLE_SECONDS,
        metavar="SECONDS",
        help="a console writer that sends no keystroke for this long is disconnected "
        "(default %(default)s; 0: never)",
    )
    parser.add_argument(
        "--console-viewer-idle-timeout",
        type=_seconds_or_off,
        default=c.CONSOLE_VIEWER_IDLE_SECONDS,
        metavar="SECONDS",
        help="the same for read-only viewers (default %(default)s: never)",
    )
    parser.add_argument(
        "--guest-netns",
        default=None,
        metavar="NAME|PATH",
        help="network namespace in which port-forward connects to guests (a name in /run/netns "
        "or a path such as /proc/PID/ns/net), for a libvirtd whose networks live in one; "
        "default: the daemon's own, which on a KVM host routes to its libvirt networks",
    )
    parser.add_argument(
        "--console-log-dir",
        default=None,
        metavar="DIR",
        help="host directory where each machine's serial console is logged "
        "(<domain>.serial.log, removed with the machine); created at start when its parent "
        "exists; in remote mode (with --console-port), the directory where this replica keeps "
        "the console logs of the remote hosts it serves; default: no console logs",
    )
    parser.add_argument(
        "--console-log-bytes",
        type=_positive_int,
        default=c.CONSOLE_LOG_BYTES,
        metavar="BYTES",
        help="remote mode: a kept console log is rotated at this size (one rotated file kept, "
        f"so a machine takes at most twice this); default {c.CONSOLE_LOG_BYTES}",
    )
    parser.add_argument(
        "--image-gc-interval",
        type=_positive_seconds,
        default=300.0,
        metavar="SECONDS",
        help="seconds between periodic passes over this host's cached images (status entries "
        "and collection of unused bases); they also run on image and machine deletions",
    )
    parser.add_argument(
        "--image-handout-grace",
        type=_positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help="seconds a base image handed to a new machine stays protected from collection, "
        "covering the moment before the machine's overlay exists on it",
    )
    parser.add_argument(
        "--preemption-grace",
        type=int,
        default=c.PREEMPTION_GRACE_SECONDS,
        metavar="SECONDS",
        help="seconds a preempted spot machine's guest has to shut down before it is powered "
        f"off (default {c.PREEMPTION_GRACE_SECONDS})",
    )
    parser.add_argument(
        "--readiness-interval",
        type=_positive_seconds,
        default=READINESS_INTERVAL,
        metavar="SECONDS",
        help="seconds between two runs of /readyz's checks (libvirtd, the API server) while "
        f"they pass; every second while they fail (default {READINESS_INTERVAL:g}, the "
        "DaemonSet's readiness probe period)",
    )
    parser.add_argument(
        "--missing-provider-grace",
        type=_positive_seconds,
        default=vmapi.MISSING_PROVIDER_GRACE_SECONDS,
        metavar="SECONDS",
        help="how long the embedded generic controller lets a new VirtualMachine's provider "
        "object be missing before the VM reports NotAdopted with a Warning (default "
        f"{vmapi.MISSING_PROVIDER_GRACE_SECONDS:g}); raise it where VMs and their provider "
        "objects are applied further apart",
    )
    parser.add_argument(
        "--heartbeat-grace",
        type=_heartbeat_grace,
        default=c.HEARTBEAT_GRACE_SECONDS,
        metavar="SECONDS",
        help="how long a host's heartbeat vouches for it: placement avoids a host that has not "
        "renewed it for this long, and then reports its machines HostNotReady; renewed every "
        f"quarter of it, at most every {c.HEARTBEAT_SECONDS:g} s (default "
        f"{c.HEARTBEAT_GRACE_SECONDS:g}; give every daemon the same)",
    )
    parser.add_argument(
        "--migration-uri",
        default=None,
        metavar="URI",
        help="this host's libvirtd as other hosts' libvirtds reach it to migrate machines here "
        "(qemu+tls://ADDRESS/system; docs/migration.md). Without it the host takes no migrations",
    )
    parser.add_argument(
        "--migration-pkipath",
        default=None,
        metavar="DIR",
        help="the folder of TLS client credentials (cacert.pem, clientcert.pem, clientkey.pem) "
        "this host's libvirtd uses to open a target's libvirtd when it migrates a machine away; "
        "with --migration-secret the daemon writes them there",
    )
    parser.add_argument(
        "--migration-secret",
        default=None,
        metavar="NAME",
        help="a Secret in the daemon's namespace (--lease-namespace) with ca.crt, tls.crt and "
        "tls.key: written into --migration-pkipath (which it needs) before each migration this "
        "host sends, so that the operator places no files (docs/migration.md)",
    )
    parser.add_argument(
        "--migration-max-per-host",
        type=_positive_int,
        default=c.MIGRATION_MAX_PER_HOST,
        metavar="N",
        help="migrations this host sends at once; more wait in Pending with the reason "
        f"{c.MIGRATION_REASON_HOST_LIMIT} (default {c.MIGRATION_MAX_PER_HOST})",
    )
    parser.add_argument(
        "--migration-max-per-cluster",
        type=_positive_int,
        default=c.MIGRATION_MAX_PER_CLUSTER,
        metavar="M",
        help="migrations running at once in the cluster, counted from the LibvirtMigrations "
        f"when one is accepted; more wait with the reason {c.MIGRATION_REASON_CLUSTER_LIMIT} "
        f"(default {c.MIGRATION_MAX_PER_CLUSTER}; give every daemon the same)",
    )
    parser.add_argument(
        "--migration-no-progress-timeout",
        type=_positive_seconds,
        default=c.MIGRATION_NO_PROGRESS_SECONDS,
        metavar="SECONDS",
        help="abort a migration whose bytes left (memory and disk) did not shrink for this long "
        f"(default {c.MIGRATION_NO_PROGRESS_SECONDS:g})",
    )
    parser.add_argument(
        "--migration-deadline-per-gib",
        type=_positive_seconds,
        default=c.MIGRATION_DEADLINE_SECONDS_PER_GIB,
        metavar="SECONDS",
        help="abort a migration running longer than this many seconds per GiB of memory and "
        f"disk to copy (default {c.MIGRATION_DEADLINE_SECONDS_PER_GIB:g})",
    )
    parser.add_argument(
        "--no-image-gc",
        action="store_true",
        help="never delete cached base images (e.g. when pools are shared between hosts)",
    )
    parser.add_argument("--workers", type=int, default=4, help="reconcile threads per controller")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text lines, or one JSON object per line (time, level, logger, message) for log "
        "shippers",
    )
    return parser


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def _configure_logging(level: str, log_format: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(
        _JsonFormatter()
        if log_format == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    handler.addFilter(_expected_kopf_warnings)
    logging.basicConfig(level=level.upper(), handlers=[handler])
    # kopf reports every handled watch event and every start-up activity at INFO; at INFO the
    # log should say what the daemon does to machines, which the controllers log themselves.
    quiet = max(logging.WARNING, logging.root.level)
    for name in ("kopf.objects", "kopf.activities", "kopf._core.engines.activities"):
        logging.getLogger(name).setLevel(quiet)


def _expected_kopf_warnings(record: logging.LogRecord) -> bool:
    # The daemon runs its kopf operators on threads by design and handles signals itself.
    return not record.getMessage().startswith("OS signals are ignored")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        paths = check_config(
            PathFlags(
                kubeconfig=args.kubeconfig,
                libvirt_uri=args.libvirt_uri,
                console_log_dir=args.console_log_dir,
            )
        )
        host = args.host or default_host()
        if not args.remote:
            check_host_name(host)
    except ConfigError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    if args.console_port is not None and not (args.console_cert_file and args.console_key_file):
        parser.error("--console-port needs --console-cert-file and --console-key-file")
    if args.console_hop_port is not None:
        if args.console_port is None or not args.console_hop_ca_file:
            parser.error("--console-hop-port needs --console-port and --console-hop-ca-file")
        if parse_hop_address(format_hop_address(args.console_advertise_address, 1)) is None:
            parser.error(
                "--console-hop-port needs --console-advertise-address (or $POD_IP) to be an IP "
                f"address, not {args.console_advertise_address!r}"
            )
    if args.migration_secret and not args.migration_pkipath:
        parser.error(
            "--migration-secret needs --migration-pkipath: the folder the host's libvirtd reads "
            "the credentials from"
        )
    _configure_logging(args.log_level, args.log_format)
    domain_types = (
        frozenset(t.strip() for t in args.domain_types.split(",") if t.strip())
        if args.domain_types
        else None
    )
    return run(
        DaemonConfig(
            kubeconfig=paths.kubeconfig,
            libvirt_uri=paths.libvirt_uri,
            host=host,
            domain_types=domain_types,
            health_address=args.health_address,
            health_port=args.health_port,
            metrics_address=args.metrics_address,
            metrics_port=args.metrics_port,
            generic=not args.no_generic,
            lease_namespace=args.lease_namespace,
            workers=args.workers,
            generic_namespaces=tuple(args.generic_namespace),
            console_log_dir=paths.console_log_dir,
            console_log_bytes=args.console_log_bytes,
            console_port=args.console_port,
            console_address=args.console_address,
            console_cert_file=args.console_cert_file or "",
            console_key_file=args.console_key_file or "",
            console_hop_port=args.console_hop_port,
            console_hop_ca_file=args.console_hop_ca_file or "",
            console_advertise_address=args.console_advertise_address,
            console_replay_bytes=args.console_replay_bytes,
            console_idle_timeout=args.console_idle_timeout,
            console_viewer_idle_timeout=args.console_viewer_idle_timeout,
            guest_netns=args.guest_netns,
            image_gc_interval=args.image_gc_interval,
            image_gc=not args.no_image_gc,
            image_handout_grace=args.image_handout_grace,
            preemption_grace=max(1, args.preemption_grace),
            migration_uri=args.migration_uri,
            migration_pkipath=args.migration_pkipath,
            migration_secret=args.migration_secret,
            migration_limits=MigrationLimits(
                per_host=args.migration_max_per_host,
                per_cluster=args.migration_max_per_cluster,
                no_progress_seconds=args.migration_no_progress_timeout,
                deadline_seconds_per_gib=args.migration_deadline_per_gib,
            ),
            remote=args.remote,
            identity=args.identity or "",
            credentials_dir=args.credentials_dir,
            heartbeat_grace=args.heartbeat_grace,
            missing_provider_grace=args.missing_provider_grace,
            readiness_interval=args.readiness_interval,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
