"""The processes under test, started as an operator starts them: the provider daemon (one, a fleet
of one per lab host, or in remote mode inside the lab's client namespace) and the generic
controller on its own; and what they announce (their health endpoint, their metrics).

Why a module of its own: fixtures, tests that stop and restart daemons on purpose, and the bench
scripts all start the same command lines with the same logs (`.logs/`, or $VMAPI_LAB_LOGS); one
copy keeps a flag added to the daemon from reaching only some of them.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config

from tests.support.hosts import LAB_HOST_SPEC, declare_host, host_ready
from tests.support.kube import SYSTEM_NAMESPACE
from tests.support.lab_access import REPO, LabHost, LabInfo, LabRemote
from tests.support.waiting import eventually


def log_dir() -> Path:
    """Where the processes under test log, beside the lab's logs: `.logs/` or $VMAPI_LAB_LOGS."""
    return Path(os.environ.get("VMAPI_LAB_LOGS") or REPO / ".logs")


# -- the provider daemon --------------------------------------------------------------------------


def console_log_dir(lab: LabInfo) -> Path:
    """Where the e2e daemons log serial consoles: inside the lab, so lab-down removes it. The
    daemon creates it (its parent, the lab's folder, exists), as it does under `make run`."""
    return Path(lab.dir) / "consoles"


def start_daemon(
    lab: LabInfo,
    *,
    host: str,
    log_name: str,
    kubeconfig: str | None = None,
    generic: bool = True,
    lease_namespace: str = SYSTEM_NAMESPACE,
    crash_point: str | None = None,
    generic_namespaces: tuple[str, ...] = (),
    libvirt_uri: str | None = None,
    host_spec: dict[str, Any] | None = LAB_HOST_SPEC,
    extra_args: tuple[str, ...] = (),
) -> tuple[subprocess.Popen[bytes], Path]:
    """`libvirt-provider` against the lab, its output in a fresh log; its embedded generic
    controller serves `generic_namespaces` (patterns), or every namespace. `host_spec` is
    merged into the host's LibvirtHost first (None: the LibvirtHost is left as it is);
    `extra_args` are appended to its flags.
    """
    if host_spec is not None:
        with config.new_client_from_config(lab.kubeconfig) as admin:
            declare_host(admin, host, host_spec)
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "VMAPI_CRASH_POINT")}
    if crash_point:
        env["VMAPI_CRASH_POINT"] = crash_point
    args = [
        sys.executable,
        "-m",
        "libvirt_provider",
        f"--kubeconfig={kubeconfig or lab.kubeconfig}",
        f"--libvirt-uri={libvirt_uri or lab.libvirt_uri}",
        f"--host={host}",
        f"--domain-types={lab.domain_type}",
        "--health-address=127.0.0.1",
        "--health-port=0",
        f"--lease-namespace={lease_namespace}",
        f"--console-log-dir={console_log_dir(lab)}",
    ]
    if not generic:
        args.append("--no-generic")
    args += [f"--generic-namespace={pattern}" for pattern in generic_namespaces]
    args += list(extra_args)
    log = log_dir() / log_name
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    return proc, log


def stop_daemon(proc: subprocess.Popen[bytes], log: Path) -> None:
    """Stop a daemon `start_daemon` started and assert it exited 0 (killed after 60 s)."""
    proc.terminate()
    try:
        assert proc.wait(timeout=60) == 0, f"the daemon did not stop cleanly; see {log}"
    finally:
        if proc.poll() is None:
            proc.kill()


def health_base(proc: subprocess.Popen[bytes], log: Path) -> str:
    """The base URL of a starting daemon's health endpoint, once it announced it."""
    found = eventually(
        lambda: proc.poll() is None and re.search(r"health on 127\.0\.0\.1:(\d+)", log.read_text()),
        timeout=60,
        what=f"the daemon announcing its health endpoint (log: {log})",
    )
    return f"http://127.0.0.1:{found.group(1)}"


def answers(url: str, *, timeout: float = 5) -> bool:
    """Whether `url` answers 200 within `timeout` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


# -- a daemon per lab host ------------------------------------------------------------------------


@dataclass
class Daemon:
    host: LabHost
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class Fleet:
    """The module's daemons, one per lab host; tests may stop and start them."""

    lab: LabInfo
    api: client.ApiClient
    daemons: dict[str, Daemon] = field(default_factory=dict)
    # Flags every daemon of the fleet gets besides the usual ones.
    extra_args: tuple[str, ...] = ()
    # Flags of one host's daemon (its migration address and credentials, say).
    host_args: Callable[[LabHost], tuple[str, ...]] = field(default=lambda _host: ())

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.lab.hosts]

    def start(self, host: LabHost, *, crash_point: str | None = None) -> Daemon:
        proc, log = start_daemon(
            self.lab,
            host=host.name,
            libvirt_uri=host.uri,
            log_name=f"e2e-placement-{host.name}{'-crash' if crash_point else ''}.log",
            lease_namespace=SYSTEM_NAMESPACE,
            crash_point=crash_point,
            host_spec=None,  # placement's tests set their hosts' spec
            extra_args=self.extra_args + self.host_args(host),
        )
        health_base(proc, log)
        daemon = Daemon(host, proc, log)
        self.daemons[host.name] = daemon
        return daemon

    def start_together(self, hosts: list[LabHost]) -> None:
        """A daemon per host, all started at once (as a DaemonSet's pods start), then waited
        for."""
        started = [
            (
                host,
                *start_daemon(
                    self.lab,
                    host=host.name,
                    libvirt_uri=host.uri,
                    log_name=f"e2e-placement-{host.name}.log",
                    lease_namespace=SYSTEM_NAMESPACE,
                    host_spec=None,
                    extra_args=self.extra_args + self.host_args(host),
                ),
            )
            for host in hosts
        ]
        for host, proc, log in started:
            health_base(proc, log)
            self.daemons[host.name] = Daemon(host, proc, log)

    def stop(self, name: str, *, kill: bool = False) -> None:
        daemon = self.daemons.pop(name)
        if kill:
            daemon.proc.kill()
            daemon.proc.wait(30)
            return
        daemon.proc.terminate()
        try:
            assert daemon.proc.wait(timeout=60) == 0, f"daemon {name} did not stop cleanly"
        finally:
            if daemon.proc.poll() is None:
                daemon.proc.kill()

    def leader(self) -> str:
        """The host whose daemon holds the generic controller's Lease."""
        lease = client.CoordinationV1Api(self.api).read_namespaced_lease(
            "vm-api-generic-controller", SYSTEM_NAMESPACE
        )
        holder = str(lease.spec.holder_identity or "")
        found = [n for n in self.daemons if holder.startswith(f"{n}-")]
        assert found, f"no running daemon holds the Lease (holder {holder!r})"
        return found[0]

    def wait_hosts_ready(self, names: list[str] | None = None) -> None:
        for name in names or self.names:
            eventually(
                lambda name=name: host_ready(self.api, name),
                timeout=90,
                what=f"LibvirtHost {name} Ready with its inventory",
            )

    def stop_all(self) -> None:
        for name in list(self.daemons):
            self.stop(name)


# -- the daemon in remote mode --------------------------------------------------------------------


_LOG_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ")
_REFUSAL = re.compile(r"\b403\b|forbidden", re.IGNORECASE)


@dataclass
class RemoteDaemon:
    identity: str
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def refusals(self) -> list[str]:
        """The log lines where the API server refused the daemon something (403, Forbidden).

        Each line's timestamp is left out first: its milliseconds once read ",403".
        """
        lines = (_LOG_TIMESTAMP.sub("", line) for line in self.text().splitlines())
        return [line for line in lines if _REFUSAL.search(line)]

    def stop(self, *, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
            self.proc.wait(30)
            return
        self.proc.terminate()
        try:
            assert self.proc.wait(timeout=60) == 0, f"{self.identity} did not stop cleanly"
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def start_remote_daemon(
    lab: LabInfo,
    remote: LabRemote,
    identity: str,
    *,
    generic: bool = True,
    kubeconfig: str | None = None,
    lease_namespace: str = SYSTEM_NAMESPACE,
    extra_args: tuple[str, ...] = (),
) -> RemoteDaemon:
    """`libvirt-provider --remote` in the lab's client namespace, its output in a fresh log."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "VMAPI_CRASH_POINT")}
    logs = log_dir()
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"e2e-remote-{identity}.log"
    args = [
        "ip",
        "netns",
        "exec",
        remote.client_netns,
        sys.executable,
        "-m",
        "libvirt_provider",
        "--remote",
        f"--identity={identity}",
        f"--kubeconfig={kubeconfig or lab.kubeconfig}",
        f"--domain-types={lab.domain_type}",
        "--health-address=127.0.0.1",
        "--health-port=0",
        f"--lease-namespace={lease_namespace}",
        f"--credentials-dir={Path(lab.dir) / 'remote-credentials'}",
    ]
    if not generic:
        args.append("--no-generic")
    args.extend(extra_args)
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=str(REPO))
    daemon = RemoteDaemon(identity, proc, log)
    eventually(
        lambda: proc.poll() is None and "in remote mode as" in daemon.text(),
        timeout=60,
        what=f"remote daemon {identity} started (log: {log})",
    )
    return daemon


def metrics(daemon: RemoteDaemon, remote: LabRemote) -> str:
    """The daemon's /metrics, read inside its network namespace."""
    port = re.search(r"health on 127\.0\.0\.1:(\d+)", daemon.text())
    assert port, "the daemon did not announce its health endpoint"
    script = (
        "import sys,urllib.request;"
        f"sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:{port.group(1)}/metrics',"
        "timeout=10).read().decode())"
    )
    return subprocess.run(
        ["ip", "netns", "exec", remote.client_netns, sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout


def metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} ") or line.startswith(f"{name}{{{want},"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name}{{{want}}} in /metrics")


# -- the generic controller on its own ------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_controller(
    kubeconfig: str, pattern: str, log: Path, *, metrics_port: int = 0
) -> subprocess.Popen[bytes]:
    """`python -m generic` serving namespaces that match `pattern`, appending to `log`."""
    marker = "generic controller started"
    started_before = log.read_text().count(marker) if log.exists() else 0
    command = [sys.executable, "-m", "generic", "--kubeconfig", kubeconfig, "--namespace", pattern]
    if metrics_port:
        command += ["--metrics-port", str(metrics_port)]
    with log.open("a") as out:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    eventually(
        lambda: log.read_text().count(marker) > started_before,
        timeout=30,
        what="controller started",
    )
    return process


def stop_controller(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass(frozen=True)
class RunningController:
    log: Path
    metrics_url: str
