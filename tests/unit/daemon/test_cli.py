"""The daemon's command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from libvirt_provider import constants as c
from libvirt_provider.__main__ import build_parser
from libvirt_provider.adapters.process.daemon import DaemonConfig, leader_settings
from libvirt_provider.adapters.process.startup import (
    ConfigError,
    PathFlags,
    check_config,
    check_host_name,
    check_libvirt_uri,
)


def test_help_names_the_product() -> None:
    assert "vm-api.io" in build_parser().format_help()


def test_module_entry_point_prints_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "libvirt_provider", "--help"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0
    assert "--libvirt-uri" in out.stdout


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "libvirt_provider", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_console_log_dir_whose_parent_is_missing_refuses_to_start(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "consoles"
    out = _run(f"--console-log-dir={missing}", "--libvirt-uri=test:///default")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr  # one clear line, no traceback
    assert "--console-log-dir" in lines[0]
    assert str(missing) in lines[0]


def test_a_missing_kubeconfig_refuses_to_start(tmp_path: Path) -> None:
    out = _run(f"--kubeconfig={tmp_path / 'kc'}")
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"libvirt-provider: error: --kubeconfig {str(tmp_path / 'kc')!r}: no such file"
    )


@pytest.mark.parametrize(
    ("uri", "complaint"),
    [
        ("qemu//system", "not a libvirt URI"),
        ("xen:///system", "driver 'xen' is not supported"),
        ("qemu+carrier://host/system", "unknown transport 'carrier'"),
        ("qemu:///system?socket=/nonexistent/dir/libvirt-sock", "does not exist"),
    ],
)
def test_a_libvirt_uri_that_cannot_work_is_refused(uri: str, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint):
        check_libvirt_uri(uri)


@pytest.mark.parametrize(
    "uri", ["qemu:///system", "qemu+ssh://root@kvm1/system", "test:///default", "qemu:///session"]
)
def test_usual_libvirt_uris_pass(uri: str) -> None:
    check_libvirt_uri(uri)


def test_the_console_log_dir_is_created_when_its_parent_exists(tmp_path: Path) -> None:
    wanted = tmp_path / "consoles"
    flags = check_config(
        PathFlags(kubeconfig=None, libvirt_uri="qemu:///system", console_log_dir=str(wanted))
    )
    assert wanted.is_dir()
    assert flags.console_log_dir == str(wanted)


def test_a_relative_console_log_dir_is_refused() -> None:
    with pytest.raises(ConfigError, match="absolute"):
        check_config(
            PathFlags(kubeconfig=None, libvirt_uri="qemu:///system", console_log_dir="consoles")
        )


def test_a_host_name_too_long_for_the_host_label_refuses_to_start() -> None:
    host = "h" * 64
    out = _run(f"--host={host}", "--libvirt-uri=test:///default")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert f"--host {host!r}: 64 characters" in lines[0]
    assert "at most 63" in lines[0]


@pytest.mark.parametrize("host", ["Node-1", "node_1", "-node", "node.", "a" * 241])
def test_host_names_kubernetes_would_refuse_are_refused(host: str) -> None:
    with pytest.raises(ConfigError, match="--host"):
        check_host_name(host)


@pytest.mark.parametrize("host", ["node-1", "kvm1.example.com", "a" * 63])
def test_usual_host_names_pass(host: str) -> None:
    check_host_name(host)


def test_console_port_needs_a_serving_certificate() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "libvirt_provider", "--console-port=8443", "--host=h1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    assert "--console-cert-file" in out.stderr


@pytest.mark.parametrize(
    ("extra", "pod_ip", "complaint"),
    [
        (("--console-hop-port=8444",), None, "--console-hop-ca-file"),
        (("--console-hop-port=8444", "--console-hop-ca-file=/x"), None, "not ''"),
        (("--console-hop-port=8444", "--console-hop-ca-file=/x"), "node-1", "not 'node-1'"),
        (
            (
                "--console-hop-port=8444",
                "--console-hop-ca-file=/x",
                "--console-advertise-address=a:b",
            ),
            "10.0.0.1",
            "not 'a:b'",
        ),
    ],
    ids=["no CA", "no address", "a name from POD_IP", "not an IP"],
)
def test_the_hop_port_needs_its_ca_and_an_ip_to_publish(
    extra: tuple[str, ...], pod_ip: str | None, complaint: str
) -> None:
    """docs/console.md, "Routing": other daemons dial the published IP and verify against the CA."""
    env = {k: v for k, v in os.environ.items() if k != "POD_IP"}
    if pod_ip is not None:
        env["POD_IP"] = pod_ip
    out = subprocess.run(
        [
            sys.executable, "-m", "libvirt_provider", "--host=h1", "--console-port=8443",
            "--console-cert-file=/c", "--console-key-file=/k", *extra,
        ],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )  # fmt: skip
    assert out.returncode == 2
    assert complaint in out.stderr
    assert "--console-hop-port" in out.stderr


def test_a_migration_secret_needs_the_folder_to_write_it_into() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "libvirt_provider", "--host=h1", "--migration-secret=tls"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    assert "--migration-secret needs --migration-pkipath" in out.stderr


def test_kubectl_vm_help_names_the_console_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "libvirt_provider.adapters.plugin.kubectl_vm", "console", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Ctrl-]" in out.stdout
    assert "--namespace" in out.stdout


def test_the_migration_limits_default_to_kubevirts_and_refuse_zero() -> None:
    args = build_parser().parse_args([])
    assert (args.migration_max_per_host, args.migration_max_per_cluster) == (2, 5)
    assert args.migration_no_progress_timeout == c.MIGRATION_NO_PROGRESS_SECONDS == 150
    assert args.migration_deadline_per_gib == c.MIGRATION_DEADLINE_SECONDS_PER_GIB == 150
    args = build_parser().parse_args(
        ["--migration-max-per-host=1", "--migration-deadline-per-gib=9"]
    )
    assert (args.migration_max_per_host, args.migration_deadline_per_gib) == (1, 9.0)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--migration-max-per-cluster=0"])


def test_the_heartbeat_grace_defaults_to_forty_seconds_and_refuses_less_than_four() -> None:
    assert build_parser().parse_args([]).heartbeat_grace == c.HEARTBEAT_GRACE_SECONDS == 40
    assert build_parser().parse_args(["--heartbeat-grace=12"]).heartbeat_grace == 12.0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--heartbeat-grace=3"])


def test_the_missing_provider_grace_defaults_to_ten_seconds_and_reaches_the_leader() -> None:
    assert build_parser().parse_args([]).missing_provider_grace == 10.0
    args = build_parser().parse_args(["--missing-provider-grace=2.5"])
    assert args.missing_provider_grace == 2.5
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--missing-provider-grace=0"])
    cfg = DaemonConfig(
        kubeconfig=None,
        libvirt_uri="test:///default",
        host="h",
        domain_types=None,
        health_address="127.0.0.1",
        health_port=0,
        generic=True,
        lease_namespace="ns",
        workers=1,
        missing_provider_grace=2.5,
    )
    assert leader_settings(cfg, "h").missing_provider_grace == 2.5


def test_the_readiness_interval_defaults_to_the_probe_period_and_must_be_positive() -> None:
    assert build_parser().parse_args([]).readiness_interval == 10.0
    assert build_parser().parse_args(["--readiness-interval=2"]).readiness_interval == 2.0
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--readiness-interval=0"])
