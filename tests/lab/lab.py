"""The local lab: a real kube-apiserver and a real libvirtd, started and stopped by one script.

Test infrastructure, not product: `make lab-up`, `make lab-down`, `make lab-env` and the e2e tests'
fixtures all go through here. Standard library only, so it runs before anything else is installed.

What `up` builds, in order, stopping at the first failure with one line that names the failing part
and its log (and then taking down whatever it had started):

- the control-plane binary (cached outside the clone, see kube/build.sh) and the two test guest
  images: the busybox one (guest/build-image.sh) and the Debian one (guest-debian/build-image.sh),
  both cached by content;
- certificates, then kube-apiserver with embedded etcd on 127.0.0.1 (RBAC on), ready when /readyz
  answers ok, then kube-controller-manager for garbage collection and namespace cleanup;
- a network namespace owned by the lab, and inside it, in a private mount namespace, a libvirtd
  whose config, state, run and socket directories all live under the lab directory, so it neither
  touches nor depends on a host libvirtd; two isolated libvirt networks (no <forward>; one with
  DHCP, one without) and a directory storage pool holding both test guests' disks;
- the domain type guests should use: `kvm` only if a probe guest really boots under KVM here,
  otherwise `qemu` (software emulation). /dev/kvm existing is not enough on nested hosts.

`down` kills every process in the lab's namespace and the control plane, deletes the namespace (and
with it the bridge) and removes the lab directory. Mounts exist only in the private mount namespace,
so they vanish with its last process.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


class LabError(Exception):
    """A lab step failed; the message is the one line a person needs, log path included."""


@dataclass(frozen=True)
class Lab:
    """Every name and path the lab uses, so that `up`, `down` and `env` agree on them."""

    dir: Path
    cache: Path
    netns: str
    api_port: int
    etcd_port: int

    @classmethod
    def from_env(cls) -> Lab:
        cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return cls(
            dir=Path(os.environ.get("VMAPI_LAB_DIR") or REPO / ".lab"),
            cache=Path(os.environ.get("VMAPI_LAB_CACHE") or cache_home / "vm-api-lab"),
            netns=os.environ.get("VMAPI_LAB_NETNS", "vmapilab"),
            api_port=int(os.environ.get("VMAPI_LAB_API_PORT", "16443")),
            etcd_port=int(os.environ.get("VMAPI_LAB_ETCD_PORT", "12379")),
        )

    @property
    def logs(self) -> Path:
        return Path(os.environ.get("VMAPI_LAB_LOGS") or REPO / ".logs")

    @property
    def pki(self) -> Path:
        return self.dir / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.pki / "admin.kubeconfig"

    @property
    def bin(self) -> Path:
        return self.dir / "bin"

    @property
    def libvirt(self) -> Path:
        return self.dir / "libvirt"

    @property
    def libvirt_socket(self) -> Path:
        return self.libvirt / "sock" / "libvirt-sock"

    @property
    def libvirt_uri(self) -> str:
        return f"qemu:///system?socket={self.libvirt_socket}"

    @property
    def pool_dir(self) -> Path:
        return self.dir / "pool"

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def env_file(self) -> Path:
        return self.dir / "env"

    network = "vmapi-lab"
    bridge = "vmapibr0"
    pool = "vmapi-lab"
    guest_volume = "vmapi-test-guest.qcow2"
    debian_volume = "vmapi-debian-guest.qcow2"
    subnet_prefix = "10.213.0"
    # A second isolated network without DHCP: guests there have only the addresses their
    # cloud-init network-data gives them, which only their guest agent can report.
    static_network = "vmapi-lab-static"
    static_bridge = "vmapibr1"
    static_subnet_prefix = "10.213.1"


# ---------------------------------------------------------------------------------------------
# small process helpers


def run(cmd: list[str], *, what: str, log: Path | None = None, **kwargs: object) -> str:
    """Run a command; on failure raise LabError naming `what` and where its output went."""
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as fh:
            fh.write(f"$ {shlex.join(cmd)}\n{proc.stdout}{proc.stderr}")
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        last = detail[-1] if detail else f"exit {proc.returncode}"
        where = f"; log: {log}" if log else ""
        raise LabError(f"{what} failed: {last}{where}")
    return str(proc.stdout)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(predicate: object, *, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(interval)
    return bool(predicate())  # type: ignore[operator]


def stop_pids(pids: list[int], *, grace: float = 10.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    if not wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=grace):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=5)
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def spawn(cmd: list[str], *, log: Path) -> int:
    """Start a long-running process detached from our session, output appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return proc.pid


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def netns_pids(name: str) -> list[int]:
    if not netns_exists(name):
        return []
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


# ---------------------------------------------------------------------------------------------
# builds


def build_kube(lab: Lab) -> Path:
    log = lab.logs / "kube-build.log"
    out = run(
        [str(HERE / "kube" / "build.sh"), str(lab.cache), str(log)],
        what="building the control plane (kube/build.sh)",
    )
    return Path(out.strip().splitlines()[-1])


def build_guest(lab: Lab) -> Path:
    log = lab.logs / "guest-build.log"
    out = run(
        [str(HERE / "guest" / "build-image.sh"), str(lab.cache)],
        what="building the test guest image (guest/build-image.sh)",
        log=log,
    )
    return Path(out.strip().splitlines()[-1])


def build_debian_guest(lab: Lab) -> Path:
    log = lab.logs / "guest-debian-build.log"
    out = run(
        [str(HERE / "guest-debian" / "build-image.sh"), str(lab.cache)],
        what="building the Debian test guest image (guest-debian/build-image.sh)",
        log=log,
    )
    return Path(out.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# Kubernetes control plane


def _ssl_context(lab: Lab) -> ssl.SSLContext:
    pki = lab.pki
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    with tempfile.TemporaryDirectory() as tmp:
        # The admin kubeconfig embeds its credentials; urllib wants them as files.
        cert, key = _admin_cert_files(lab, Path(tmp))
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def _admin_cert_files(lab: Lab, tmp: Path) -> tuple[Path, Path]:
    cert_data = key_data = ""
    for raw in lab.kubeconfig.read_text().splitlines():
        line = raw.strip()
        if line.startswith("client-certificate-data:"):
            cert_data = line.split(":", 1)[1].strip()
        elif line.startswith("client-key-data:"):
            key_data = line.split(":", 1)[1].strip()
    cert, key = tmp / "admin.crt", tmp / "admin.key"
    cert.write_bytes(base64.b64decode(cert_data))
    key.write_bytes(base64.b64decode(key_data))
    return cert, key


def apiserver_ready(lab: Lab) -> bool:
    if not lab.kubeconfig.exists():
        return False
    try:
        ctx = _ssl_context(lab)
        url = f"https://127.0.0.1:{lab.api_port}/readyz"
        with urllib.request.urlopen(url, context=ctx, timeout=3) as resp:
            return bool(resp.status == 200 and resp.read().strip() == b"ok")
    except (OSError, ssl.SSLError):
        return False


def start_control_plane(lab: Lab, kube_lab: Path, state: dict[str, object]) -> None:
    server = f"https://127.0.0.1:{lab.api_port}"
    run(
        [str(kube_lab), "pki", "--dir", str(lab.pki), "--server", server],
        what="generating lab certificates",
        log=lab.logs / "pki.log",
    )
    pki = lab.pki
    log = lab.logs / "kube-apiserver.log"
    pid = spawn(
        [
            str(kube_lab),
            "apiserver",
            "--etcd-dir",
            str(lab.dir / "etcd"),
            "--etcd-port",
            str(lab.etcd_port),
            "--",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={lab.api_port}",
            f"--cert-dir={lab.dir / 'apiserver-certs'}",
            f"--tls-cert-file={pki / 'serving.crt'}",
            f"--tls-private-key-file={pki / 'serving.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
            "--v=0",
        ],
        log=log,
    )
    state["apiserver_pid"] = pid
    save_state(lab, state)
    if not wait_for(lambda: apiserver_ready(lab) or not pid_alive(pid), timeout=180, interval=0.5):
        raise LabError(f"kube-apiserver did not become ready within 180 s; log: {log}")
    if not pid_alive(pid):
        raise LabError(f"kube-apiserver exited during start-up; log: {log}")

    kcm_log = lab.logs / "kube-controller-manager.log"
    state["controller_manager_pid"] = spawn(
        [
            str(kube_lab),
            "controller-manager",
            f"--kubeconfig={pki / 'controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={pki / 'controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={pki / 'controller-manager.kubeconfig'}",
            "--controllers=garbage-collector-controller,namespace-controller,"
            "serviceaccount-controller,serviceaccount-token-controller",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            # Each controller acts as its own ServiceAccount with its upstream role, as in a real
            # cluster; the controller-manager user alone may not touch custom resources, which
            # left namespaces holding them Terminating forever.
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            "--v=0",
        ],
        log=kcm_log,
    )
    save_state(lab, state)


# ---------------------------------------------------------------------------------------------
# libvirt inside the lab's network namespace


LIBVIRT_DIRS = (
    "/etc/libvirt",
    "/run/libvirt",
    "/var/lib/libvirt",
    "/var/cache/libvirt",
    "/var/log/libvirt",
)


def write_libvirt_config(lab: Lab) -> None:
    root = lab.libvirt
    for sub in ("sock", "etc", "run", "lib", "cache", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    lab.logs.mkdir(parents=True, exist_ok=True)
    (root / "etc" / "libvirtd.conf").write_text(
        f'unix_sock_dir = "{root / "sock"}"\n'
        'unix_sock_group = "root"\n'
        'unix_sock_rw_perms = "0700"\n'
        'auth_unix_ro = "none"\n'
        'auth_unix_rw = "none"\n'
        f'log_outputs = "3:file:{lab.logs / "libvirtd.log"}"\n'
        # A client that vanishes must not leave its connection hanging forever.
        "keepalive_interval = 5\n"
        "keepalive_count = 5\n"
    )
    # qemu runs as root here: the lab's qemu must open /dev/kvm (mode 0600 on these machines) and
    # the lab's own directories, and no dedicated libvirt users exist without the system package.
    (root / "etc" / "qemu.conf").write_text(
        'user = "root"\n'
        'group = "root"\n'
        'security_driver = "none"\n'
        'stdio_handler = "file"\n'
        "namespaces = []\n"
        "cgroup_controllers = []\n"
        "remember_owner = 0\n"
    )
    (root / "etc" / "network.conf").write_text('firewall_backend = "iptables"\n')


def libvirt_answers(lab: Lab) -> bool:
    if not lab.libvirt_socket.exists():
        return False
    proc = subprocess.run(
        ["virsh", "-c", lab.libvirt_uri, "version"], capture_output=True, check=False, timeout=20
    )
    return proc.returncode == 0


def virsh(lab: Lab, *args: str, what: str) -> str:
    return run(
        ["virsh", "-q", "-c", lab.libvirt_uri, *args], what=what, log=lab.logs / "lab-virsh.log"
    )


def start_libvirt(
    lab: Lab, guest_image: Path, debian_image: Path, state: dict[str, object]
) -> None:
    run(["ip", "netns", "add", lab.netns], what=f"creating network namespace {lab.netns}")
    state["netns"] = lab.netns
    save_state(lab, state)
    run(
        ["ip", "netns", "exec", lab.netns, "ip", "link", "set", "lo", "up"],
        what="bringing up loopback in the lab namespace",
    )
    write_libvirt_config(lab)
    spawn_libvirtd(lab, state)

    net_xml = lab.dir / "network.xml"
    p = lab.subnet_prefix
    # No <forward> element: an isolated network. Guests reach only each other and the bridge.
    net_xml.write_text(
        f"<network><name>{lab.network}</name>"
        f"<bridge name='{lab.bridge}' stp='off' delay='0'/>"
        f"<ip address='{p}.1' netmask='255.255.255.0'>"
        f"<dhcp><range start='{p}.100' end='{p}.250'/></dhcp></ip></network>"
    )
    virsh(lab, "net-define", str(net_xml), what="defining the lab network")
    virsh(lab, "net-start", lab.network, what="starting the lab network")
    static_xml = lab.dir / "network-static.xml"
    s = lab.static_subnet_prefix
    static_xml.write_text(
        f"<network><name>{lab.static_network}</name>"
        f"<bridge name='{lab.static_bridge}' stp='off' delay='0'/>"
        f"<ip address='{s}.1' netmask='255.255.255.0'/></network>"
    )
    virsh(lab, "net-define", str(static_xml), what="defining the lab's network without DHCP")
    virsh(lab, "net-start", lab.static_network, what="starting the lab's network without DHCP")

    lab.pool_dir.mkdir(parents=True, exist_ok=True)
    virsh(
        lab,
        "pool-define-as",
        lab.pool,
        "dir",
        "--target",
        str(lab.pool_dir),
        what="defining the lab storage pool",
    )
    virsh(lab, "pool-start", lab.pool, what="starting the lab storage pool")
    shutil.copyfile(guest_image, lab.pool_dir / lab.guest_volume)
    shutil.copyfile(debian_image, lab.pool_dir / lab.debian_volume)
    virsh(lab, "pool-refresh", lab.pool, what="refreshing the lab storage pool")


def spawn_libvirtd(lab: Lab, state: dict[str, object]) -> None:
    """Start libvirtd in the lab's namespace (a private mount namespace over the lab's dirs)."""
    root = lab.libvirt
    binds = " && ".join(
        f"mkdir -p {d} && mount --bind {shlex.quote(str(root / src))} {d}"
        for d, src in zip(LIBVIRT_DIRS, ("etc", "run", "lib", "cache", "log"), strict=True)
    )
    script = (
        f"{binds} && exec libvirtd --config {shlex.quote(str(root / 'etc' / 'libvirtd.conf'))} "
        f"--pid-file {shlex.quote(str(root / 'libvirtd.pid'))}"
    )
    log = lab.logs / "libvirtd.out"
    pid = spawn(
        [
            "ip",
            "netns",
            "exec",
            lab.netns,
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
        ],
        log=log,
    )
    state["libvirtd_pid"] = pid
    save_state(lab, state)
    if not wait_for(lambda: libvirt_answers(lab) or not pid_alive(pid), timeout=60, interval=0.3):
        raise LabError(f"libvirtd did not answer within 60 s; log: {lab.logs / 'libvirtd.log'}")
    if not pid_alive(pid):
        raise LabError(f"libvirtd exited during start-up; logs: {log}, {lab.logs / 'libvirtd.log'}")


def restart_libvirtd(lab: Lab) -> None:
    """Stop libvirtd and start it again; guests keep running (libvirtd reattaches to them)."""
    state = load_state(lab)
    pid = state.get("libvirtd_pid")
    if not isinstance(pid, int) or not lab_healthy(lab):
        raise LabError("the lab is not up; run `make lab-up` first")
    stop_pids([pid])
    spawn_libvirtd(lab, state)
    print(f"lab: libvirtd restarted (pid {state['libvirtd_pid']})")


def detect_domain_type(lab: Lab, guest_image: Path) -> str:
    """`kvm` only when a guest really reaches its init under KVM here; cached per host and image."""
    forced = os.environ.get("VMAPI_LAB_DOMAIN_TYPE")
    if forced:
        return forced
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "qemu"
    qemu_version = subprocess.run(
        ["qemu-system-x86_64", "--version"], capture_output=True, text=True, check=False
    ).stdout
    key = hashlib.sha256(f"{os.uname().release}|{qemu_version}|{guest_image}".encode()).hexdigest()[
        :16
    ]
    cached = lab.cache / f"kvm-probe-{key}"
    if cached.exists():
        return cached.read_text().strip()
    result = "kvm" if _guest_boots_under_kvm(lab, guest_image) else "qemu"
    cached.write_text(result + "\n")
    return result


def _guest_boots_under_kvm(lab: Lab, guest_image: Path, deadline: float = 30.0) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        serial = Path(tmp) / "serial.log"
        proc = subprocess.Popen(
            [
                "qemu-system-x86_64",
                "-machine",
                "accel=kvm",
                "-m",
                "256",
                "-display",
                "none",
                "-nic",
                "none",
                "-drive",
                f"file={guest_image},if=virtio,snapshot=on",
                "-serial",
                f"file:{serial}",
                "-no-reboot",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            return wait_for(
                lambda: (
                    proc.poll() is None
                    and serial.exists()
                    and b"VMAPI-GUEST-BOOTED" in serial.read_bytes()
                ),
                timeout=deadline,
                interval=0.5,
            )
        finally:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------------------------------
# state and environment


def load_state(lab: Lab) -> dict[str, object]:
    try:
        return dict(json.loads(lab.state_file.read_text()))
    except (OSError, ValueError):
        return {}


def save_state(lab: Lab, state: dict[str, object]) -> None:
    lab.dir.mkdir(parents=True, exist_ok=True)
    lab.state_file.write_text(json.dumps(state, indent=2) + "\n")


def env_lines(lab: Lab, state: dict[str, object]) -> list[str]:
    venv_bin = REPO / ".venv" / "bin"
    path = f"{venv_bin}:{lab.bin}:{os.environ.get('PATH', '')}"
    values = {
        "KUBECONFIG": str(lab.kubeconfig),
        "LIBVIRT_DEFAULT_URI": lab.libvirt_uri,
        "PATH": path,
        "VMAPI_LAB_DIR": str(lab.dir),
        "VMAPI_LAB_NETNS": lab.netns,
        "VMAPI_LAB_NETWORK": lab.network,
        "VMAPI_LAB_POOL": lab.pool,
        "VMAPI_LAB_GUEST_VOLUME": lab.guest_volume,
        "VMAPI_LAB_DEBIAN_VOLUME": lab.debian_volume,
        "VMAPI_LAB_STATIC_NETWORK": lab.static_network,
        "VMAPI_LAB_STATIC_PREFIX": lab.static_subnet_prefix,
        "VMAPI_LAB_DOMAIN_TYPE": str(state.get("domain_type", "qemu")),
    }
    return [f"export {k}={shlex.quote(v)}" for k, v in values.items()]


def lab_healthy(lab: Lab) -> bool:
    state = load_state(lab)
    pids = [state.get(k) for k in ("apiserver_pid", "controller_manager_pid", "libvirtd_pid")]
    return (
        bool(state.get("ready"))
        and all(isinstance(p, int) and pid_alive(p) for p in pids)
        and netns_exists(lab.netns)
        and apiserver_ready(lab)
        and libvirt_answers(lab)
    )


# ---------------------------------------------------------------------------------------------
# commands


def up(lab: Lab) -> None:
    if lab_healthy(lab):
        print(
            f"lab: already up (kube-apiserver https://127.0.0.1:{lab.api_port}, "
            f"libvirt {lab.libvirt_uri})"
        )
        return
    if lab.dir.exists() or netns_exists(lab.netns):
        down(lab, quiet=True)
    started = time.monotonic()
    kube_lab = build_kube(lab)
    guest = build_guest(lab)
    debian = build_debian_guest(lab)
    state: dict[str, object] = {
        "kube_lab": str(kube_lab),
        "guest_image": str(guest),
        "debian_image": str(debian),
    }
    lab.dir.mkdir(parents=True, exist_ok=True)
    save_state(lab, state)
    try:
        lab.bin.mkdir(parents=True, exist_ok=True)
        (lab.bin / "kubectl").symlink_to(kube_lab)
        start_control_plane(lab, kube_lab, state)
        state["domain_type"] = detect_domain_type(lab, guest)
        start_libvirt(lab, guest, debian, state)
        state["ready"] = True
        save_state(lab, state)
        lab.env_file.write_text("\n".join(env_lines(lab, state)) + "\n")
    except (LabError, OSError, subprocess.SubprocessError) as exc:
        down(lab, quiet=True)
        raise LabError(str(exc)) from exc
    print(
        f"lab: up in {time.monotonic() - started:.1f} s: kube-apiserver "
        f"https://127.0.0.1:{lab.api_port}, libvirt {lab.libvirt_uri} (netns {lab.netns}), "
        f"guest domain type {state['domain_type']}"
    )


def down(lab: Lab, *, quiet: bool = False) -> None:
    state = load_state(lab)
    control = [
        p
        for k in ("controller_manager_pid", "apiserver_pid")
        if isinstance(p := state.get(k), int) and pid_alive(p)
    ]
    stop_pids(control)
    # Every process of the lab's libvirt (libvirtd, dnsmasq, qemu) lives in the namespace.
    for _ in range(3):
        pids = netns_pids(lab.netns)
        if not pids:
            break
        stop_pids(pids)
    if netns_exists(lab.netns):
        run(["ip", "netns", "del", lab.netns], what=f"deleting network namespace {lab.netns}")
    if lab.dir.exists():
        shutil.rmtree(lab.dir)
    if not quiet:
        print("lab: down")


def env(lab: Lab) -> None:
    if not lab.env_file.exists():
        raise LabError("the lab is not up; run `make lab-up` first")
    sys.stdout.write(lab.env_file.read_text())


def describe(lab: Lab) -> None:
    state = load_state(lab)
    if not lab_healthy(lab):
        raise LabError("the lab is not up; run `make lab-up` first")
    print("The lab is running:")
    print(
        f"  kube-apiserver {lab.api_port} on 127.0.0.1 (pid {state['apiserver_pid']}), "
        f"kube-controller-manager (pid {state['controller_manager_pid']})"
    )
    print(
        f"  libvirtd (pid {state['libvirtd_pid']}) in network namespace {lab.netns}: "
        f"{lab.libvirt_uri}"
    )
    print(
        f"  isolated networks {lab.network} ({lab.subnet_prefix}.0/24, DHCP) and "
        f"{lab.static_network} ({lab.static_subnet_prefix}.0/24, no DHCP)"
    )
    print(
        f"  storage pool {lab.pool} with {lab.guest_volume} (busybox) and {lab.debian_volume} "
        f"(Debian 12); guests use domain type {state.get('domain_type')}"
    )
    print(f"  logs in {lab.logs}")
    print('Use it from a shell: eval "$(make -s lab-env)"; kubectl get ns; virsh list --all')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lab", description=__doc__.splitlines()[0])
    parser.add_argument(
        "command", choices=["up", "down", "env", "status", "describe", "restart-libvirtd"]
    )
    args = parser.parse_args(argv)
    lab = Lab.from_env()
    try:
        if args.command == "up":
            up(lab)
        elif args.command == "down":
            down(lab)
        elif args.command == "env":
            env(lab)
        elif args.command == "describe":
            describe(lab)
        elif args.command == "restart-libvirtd":
            restart_libvirtd(lab)
        else:
            healthy = lab_healthy(lab)
            print("lab: up" if healthy else "lab: down")
            return 0 if healthy else 1
    except LabError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
