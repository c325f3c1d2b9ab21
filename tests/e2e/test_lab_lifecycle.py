"""The lab cleans up after itself: on `make lab-down`, and when a part fails to start."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lab_access import LAB_SCRIPT, REPO, LabInfo


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid() or not _alive(int(proc.name)):
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


def _mounts_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            mountinfo = (proc / "mountinfo").read_text()
        except OSError:
            continue
        found += [f"{proc.name}: {line}" for line in mountinfo.splitlines() if text in line]
    return found


def _netns_names() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def _netns_pids(name: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=True)
    return [int(p) for p in out.stdout.split()]


def _links_in(netns: str) -> list[str]:
    """The names of the network interfaces in `netns`."""
    out = subprocess.run(
        ["ip", "-n", netns, "-o", "link", "show"], check=True, capture_output=True, text=True
    )
    return [line.split(":")[1].strip().split("@")[0] for line in out.stdout.splitlines()]


def _host_netns(lab_netns: str) -> list[str]:
    """The namespaces of a lab's extra libvirt hosts (`<netns>-h<i>`) that exist."""
    return [n for n in _netns_names() if re.fullmatch(rf"{re.escape(lab_netns)}-h[0-9]+", n)]


def _remote_netns(lab_netns: str) -> list[str]:
    """The namespaces of a lab's remote host and its client (`<netns>-r0`, `<netns>-rc`)."""
    return [n for n in _netns_names() if n in (f"{lab_netns}-r0", f"{lab_netns}-rc")]


@pytest.mark.lab_teardown
def test_lab_down_leaves_nothing_behind(lab: LabInfo) -> None:
    state = json.loads((lab.dir / "state.json").read_text())
    pids = [state["apiserver_pid"], state["controller_manager_pid"], state["libvirtd_pid"]]
    inside = _netns_pids(lab.netns)
    assert inside, "the lab's namespace should hold libvirtd and dnsmasq before teardown"
    pids += inside
    # The extra libvirt hosts: each one's libvirtd and dnsmasq, in its own namespace.
    assert sorted(_host_netns(lab.netns)) == sorted(h.netns for h in lab.hosts)
    pids += [h["libvirtd_pid"] for h in state.get("hosts", [])]
    for host in lab.hosts:
        in_host = _netns_pids(host.netns)
        assert in_host, f"{host.netns} should hold its libvirtd and dnsmasq before teardown"
        pids += in_host
    # The remote host and its client: namespace holder, libvirtd, dnsmasq, sshd, both forwarders.
    remote_netns = [lab.remote.netns, lab.remote.client_netns] if lab.remote else []
    assert sorted(_remote_netns(lab.netns)) == sorted(remote_netns)
    for netns in remote_netns:
        in_remote = _netns_pids(netns)
        assert in_remote, f"{netns} should hold the remote host's processes before teardown"
        pids += in_remote
    pids += [p for p in state.get("remote", {}).values() if isinstance(p, int)]
    # The extra hosts' migration switch: a bridge and one end of each host's veth pair.
    switch = f"{lab.netns}-mx"
    assert (switch in _netns_names()) == bool(lab.hosts)
    switch_links = [n for n in (_links_in(switch) if lab.hosts else []) if n.startswith("vmapimx")]
    assert len(switch_links) == len(lab.hosts) + 1, switch_links
    # The optional node (started by tests/e2e/node): its processes, and what it made on the host.
    pids += [state[k] for k in ("containerd_pid", "kubelet_pid", "scheduler_pid") if k in state]
    made = [Path(target) for target, _ in state.get("node_created_dirs", [])]

    down = subprocess.run(
        ["make", "-s", "lab-down"], check=False, cwd=REPO, capture_output=True, text=True
    )
    assert down.returncode == 0, down.stderr

    assert [p for p in pids if _alive(p)] == []
    assert lab.netns not in _netns_names()
    assert _host_netns(lab.netns) == []
    assert _remote_netns(lab.netns) == []
    assert switch not in _netns_names()
    assert not Path("/sys/class/net/vmapibr0").exists()
    for name in switch_links:
        assert not Path(f"/sys/class/net/{name}").exists(), name
    assert not lab.dir.exists()
    assert _processes_mentioning(str(lab.dir)) == []
    assert _mounts_mentioning(str(lab.dir)) == []
    assert [p for p in made if p.exists()] == []
    assert list(Path("/sys/fs/cgroup").glob(f"*/{lab.netns}")) == []


def test_failed_start_is_one_clear_line_and_leaves_nothing(tmp_path: Path) -> None:
    """A control plane that cannot start stops `up` with one line naming it and its log."""
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken_port = blocker.getsockname()[1]
        lab_dir = tmp_path / "lab"
        env = {
            **os.environ,
            "VMAPI_LAB_DIR": str(lab_dir),
            "VMAPI_LAB_LOGS": str(tmp_path / "logs"),
            "VMAPI_LAB_NETNS": "vmapilabfail",
            "VMAPI_LAB_API_PORT": str(taken_port),
            "VMAPI_LAB_ETCD_PORT": "12479",
        }
        up = subprocess.run(
            [sys.executable, str(LAB_SCRIPT), "up"],
            check=False,
            capture_output=True,
            text=True,
            env=env,
        )
    assert up.returncode != 0
    lines = up.stderr.strip().splitlines()
    assert len(lines) == 1, up.stderr
    assert "kube-apiserver" in lines[0]
    assert str(tmp_path / "logs" / "kube-apiserver.log") in lines[0]
    assert "vmapilabfail" not in _netns_names()
    assert _host_netns("vmapilabfail") == []
    assert _remote_netns("vmapilabfail") == []
    assert "vmapilabfail-mx" not in _netns_names()
    assert not lab_dir.exists()
    assert _processes_mentioning(str(lab_dir)) == []
