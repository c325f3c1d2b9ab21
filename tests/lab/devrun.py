"""`make run` (`python -m tests.lab.devrun`): the daemon against the lab, with the sample VM.

Installs the CRDs and the sample catalog and VM (deploy/samples/), starts `libvirt-provider` as
host `lab-host` with the domain type the lab detected (the sample names no host: the daemon,
leading, places it there), and once the sample VM is Ready prints `kubectl get vm -o wide`, the
LibvirtMachine with its host, and the LibvirtHosts. Ctrl-C (or SIGTERM) stops the daemon
cleanly; the lab stays up (`make lab-down` takes it down; the sample domain goes with it).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "tests" / "lab" / "lab.py"
HOST = "lab-host"
READY_TIMEOUT = 300.0


def lab_env() -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, str(LAB), "env"], capture_output=True, text=True, check=True
    ).stdout
    env = dict(os.environ)
    for line in out.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = shlex.split(value)[0] if value else ""
    return env


def kubectl(env: dict[str, str], *args: str, capture: bool = True) -> str:
    proc = subprocess.run(
        ["kubectl", *args], env=env, capture_output=capture, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"run: kubectl {' '.join(args)} failed: {(proc.stderr or '').strip()}")
    return proc.stdout or ""


def announce_when_ready(env: dict[str, str], daemon: subprocess.Popen[bytes]) -> None:
    def sample(field: str) -> str:
        return subprocess.run(
            ["kubectl", "get", "vm", "sample", "-o", f"jsonpath={{.status.{field}}}"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        ).stdout

    try:
        eventually(
            lambda: (
                daemon.poll() is not None
                or (sample("ready") == "true" and bool(sample("addresses")))
            ),
            timeout=READY_TIMEOUT,
            interval=1,
            what="the sample VM Ready",
        )
    except AssertionError:
        print(
            f"run: the sample VM was not Ready within {READY_TIMEOUT:.0f} s; "
            "see `kubectl describe vm sample` and `kubectl describe libvirtmachine sample`"
        )
        return
    if daemon.poll() is None:
        print("\nThe sample VM is Ready:\n", flush=True)
        print(kubectl(env, "get", "vm", "-o", "wide", "-n", "default"), flush=True)
        print("Placed on a host (the LibvirtMachine's HOST) among the LibvirtHosts:\n", flush=True)
        print(kubectl(env, "get", "lvm", "-n", "default"), flush=True)
        print(kubectl(env, "get", "lvh"), flush=True)
        print('In another shell: eval "$(make -s lab-env)"; kubectl describe vm sample\n')


def main() -> int:
    env = lab_env()
    kubectl(env, "apply", "-f", str(REPO / "crds"))
    kubectl(env, "wait", "--for", "condition=Established", "crd", "--all", "--timeout=60s")
    kubectl(env, "apply", "-f", str(REPO / "deploy" / "samples"))
    daemon = subprocess.Popen(
        [
            "libvirt-provider",
            "--kubeconfig",
            env["KUBECONFIG"],
            "--libvirt-uri",
            env["LIBVIRT_DEFAULT_URI"],
            "--host",
            HOST,
            "--domain-types",
            env["VMAPI_LAB_DOMAIN_TYPE"],
            "--health-address",
            "127.0.0.1",
            # Any free port: the lab's node may run the DaemonSet's pod on 9440 in the host's
            # network; the daemon logs the one it got.
            "--health-port",
            "0",
            "--lease-namespace",
            "kube-system",
            "--console-log-dir",
            str(Path(env["VMAPI_LAB_DIR"]) / "consoles"),
        ],
        env=env,
    )
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: daemon.terminate())
    threading.Thread(target=announce_when_ready, args=(env, daemon), daemon=True).start()
    code = daemon.wait()
    if code == 0:
        print("run: the daemon stopped cleanly; the lab stays up (`make lab-down` stops it)")
    else:
        print(f"run: the daemon exited with status {code}")
    return code


if __name__ == "__main__":
    sys.exit(main())
