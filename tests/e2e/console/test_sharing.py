"""A shared, sticky console (docs/console.md, "Sharing"), as users reach it with `kubectl vm
console`: read-only viewers beside the writer, a second writer refused and then taking over with
`--force` (the first is told), the last output replayed on attach, and `--logs [--follow]`.

One daemon and one booted busybox guest serve the whole module (conftest.py); each test types
markers of its own, so they do not depend on each other's order. The daemon disconnects writers
idle for `IDLE_SECONDS` (every other writer here types more often than that).
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

from kubernetes import client

from tests.support.console import Plugin, bind_console, run_plugin, user_kubeconfig
from tests.support.lab_access import LabInfo
from tests.support.waiting import GiveUp, eventually

IDLE_SECONDS = 20
CONSOLE_DAEMON_ARGS = (f"--console-idle-timeout={IDLE_SECONDS}",)


def _answered(plugin: Plugin, marker: str) -> bool:
    """Type a command only the shell can answer (`$((6*7))` becomes 42) until the answer is
    back; a plugin that exited ends the wait at once."""
    if plugin.process.poll() is not None:
        raise GiveUp(f"kubectl vm exited {plugin.process.returncode}: {plugin.errors}")
    if f"{marker}-42" in plugin.output:
        return True
    plugin.type(f"echo {marker}-$((6*7))\n")
    return f"{marker}-42" in plugin.output


def _sees(plugin: Plugin, text: str, *, timeout: float, what: str) -> None:
    def seen() -> bool:
        if text in plugin.output:
            return True
        if plugin.process.poll() is not None:
            raise GiveUp(f"kubectl vm exited {plugin.process.returncode}: {plugin.errors}")
        return False

    eventually(seen, timeout=timeout, what=f"{what} (stderr: {plugin.errors!r})")


def _marker(what: str) -> str:
    return f"VMAPI-{what}-{uuid.uuid4().hex[:8]}"


def test_a_viewer_watches_the_writer_and_a_second_writer_takes_over_with_force(
    lab: LabInfo, api_client: client.ApiClient, guest_ns: str, tmp_kubeconfig: Path
) -> None:
    user = user_kubeconfig(lab, api_client, tmp_kubeconfig, namespace=guest_ns, name="sharer")
    bind_console(api_client, guest_ns, user)
    before, during, after, typed = (_marker(w) for w in ("BEFORE", "DURING", "AFTER", "VIEWER"))
    writer = Plugin(tmp_kubeconfig, guest_ns, "guest")
    viewer: Plugin | None = None
    taker: Plugin | None = None
    try:
        eventually(lambda: _answered(writer, before), timeout=120, interval=1.0,
                   what=f"the writer's shell answering (stderr: {writer.errors!r})")  # fmt: skip
        viewer = Plugin(tmp_kubeconfig, guest_ns, "guest", "--viewer")
        # Replayed from the shared stream's ring: what the writer saw before the viewer came.
        _sees(viewer, f"{before}-42", timeout=30, what="the viewer getting the replay")
        eventually(lambda: _answered(writer, during), timeout=60, interval=1.0,
                   what="the writer's shell answering with a viewer attached")  # fmt: skip
        _sees(viewer, f"{during}-42", timeout=30, what="the viewer seeing the writer's output")
        # The viewer's keystrokes go nowhere, and its plugin says so.
        viewer.type(f"echo {typed}-$((6*7))\n")
        eventually(lambda: "keystrokes are not sent" in viewer.errors, timeout=30,
                   what=f"the viewer told (stderr: {viewer.errors!r})")  # fmt: skip
        # A second writer is refused, naming the holder and the ways in.
        code, errors = run_plugin(tmp_kubeconfig, guest_ns, "guest")
        assert code == 1
        assert "Error from server (Conflict)" in errors, errors
        assert user in errors, errors
        assert "--force" in errors, errors
        # ... unless it takes over: the first writer is disconnected and told who took over.
        taker = Plugin(tmp_kubeconfig, guest_ns, "guest", "--force")
        assert writer.process.wait(timeout=30) == 0, writer.errors
        assert f"console closed: {user} took over the console" in writer.errors, writer.errors
        eventually(lambda: _answered(taker, after), timeout=60, interval=1.0,
                   what=f"the new writer's shell answering (stderr: {taker.errors!r})")  # fmt: skip
        _sees(viewer, f"{after}-42", timeout=30, what="the viewer following the new writer")
        # Had the viewer's line reached the guest, the shell would have answered it before
        # these later commands: the serial line is one ordered stream.
        for seen_by in (writer, viewer, taker):
            assert f"{typed}-42" not in seen_by.output, seen_by.output
        assert viewer.process.poll() is None, viewer.errors
    finally:
        for plugin in (taker, viewer, writer):
            if plugin is not None:
                plugin.leave()

    def audit() -> list[str] | None:
        said = [
            f"{e.reason}: {e.message}"
            for e in client.CoreV1Api(api_client).list_namespaced_event(guest_ns).items
            if e.involved_object.name == "guest" and user in (e.message or "")
        ]
        wanted = ("ConsoleTakenOver", "as viewer", "(viewer) after")
        return said if all(any(w in m for m in said) for w in wanted) else None

    said = eventually(audit, timeout=30, what="the take-over's and the viewer's Events")
    assert f"ConsoleTakenOver: {user} took over the serial console from {user}" in " ".join(said)
    assert any(m.startswith("ConsoleDetached") and "took over the console" in m for m in said), said


def test_attach_replays_what_the_guest_printed_before(
    lab: LabInfo, api_client: client.ApiClient, guest_ns: str, tmp_kubeconfig: Path
) -> None:
    user = user_kubeconfig(lab, api_client, tmp_kubeconfig, namespace=guest_ns, name="late")
    bind_console(api_client, guest_ns, user)
    earlier = _marker("EARLIER")
    writer = Plugin(tmp_kubeconfig, guest_ns, "guest")
    try:
        eventually(lambda: _answered(writer, earlier), timeout=120, interval=1.0,
                   what=f"the shell answering (stderr: {writer.errors!r})")  # fmt: skip
    finally:
        assert writer.leave() == 0, writer.errors
    # Nobody attached now; the next session, typing nothing, starts with the last output.
    late = Plugin(tmp_kubeconfig, guest_ns, "guest", "--viewer")
    try:
        _sees(late, f"{earlier}-42", timeout=30, what="the replay on attach")
    finally:
        assert late.leave() == 0, late.errors


def test_logs_print_earlier_output_and_follow_new_output(
    lab: LabInfo, api_client: client.ApiClient, guest_ns: str, tmp_kubeconfig: Path
) -> None:
    user = user_kubeconfig(lab, api_client, tmp_kubeconfig, namespace=guest_ns, name="reader")
    bind_console(api_client, guest_ns, user)
    logged, followed = _marker("LOGGED"), _marker("FOLLOWED")
    writer = Plugin(tmp_kubeconfig, guest_ns, "guest")
    try:
        eventually(lambda: _answered(writer, logged), timeout=120, interval=1.0,
                   what=f"the shell answering (stderr: {writer.errors!r})")  # fmt: skip
        # --logs: what the host kept, then the plugin exits by itself.
        once = Plugin(tmp_kubeconfig, guest_ns, "guest", "--logs")
        assert once.process.wait(timeout=60) == 0, once.errors
        once.leave()
        assert f"{logged}-42" in once.output, once.output[-2000:]
        assert "console closed" not in once.errors, once.errors
        # --logs --follow: the same, then the output as it comes, until Ctrl-C.
        follow = Plugin(tmp_kubeconfig, guest_ns, "guest", "--logs", "--follow")
        try:
            _sees(follow, f"{logged}-42", timeout=30, what="the followed log's earlier output")
            eventually(lambda: _answered(writer, followed), timeout=60, interval=1.0,
                       what="the shell answering while the log is followed")  # fmt: skip
            _sees(follow, f"{followed}-42", timeout=30, what="the followed log's new output")
        finally:
            follow.process.send_signal(signal.SIGINT)
            assert follow.leave() == 0, follow.errors
    finally:
        assert writer.leave() == 0, writer.errors


def test_an_idle_writer_is_disconnected_and_told_why(
    lab: LabInfo, api_client: client.ApiClient, guest_ns: str, tmp_kubeconfig: Path
) -> None:
    user = user_kubeconfig(lab, api_client, tmp_kubeconfig, namespace=guest_ns, name="dozer")
    bind_console(api_client, guest_ns, user)
    marker = _marker("IDLE")
    writer = Plugin(tmp_kubeconfig, guest_ns, "guest")
    try:
        eventually(lambda: _answered(writer, marker), timeout=120, interval=1.0,
                   what=f"the shell answering (stderr: {writer.errors!r})")  # fmt: skip
        # Then nothing is typed; keepalive pongs do not count.
        eventually(lambda: writer.process.poll() is not None, timeout=IDLE_SECONDS + 30,
                   what="the idle writer disconnected")  # fmt: skip
        assert writer.process.returncode == 0, writer.errors
        assert "console closed: idle for" in writer.errors, writer.errors
        assert "the daemon's idle timeout" in writer.errors, writer.errors
    finally:
        writer.leave()

    # The audit trail says why the session ended.
    def detached() -> list[str] | None:
        said = [
            e.message or ""
            for e in client.CoreV1Api(api_client).list_namespaced_event(guest_ns).items
            if e.reason == "ConsoleDetached" and user in (e.message or "")
        ]
        return said or None

    said = eventually(detached, timeout=30, what="the idle writer's ConsoleDetached Event")
    assert any("(writer) after" in m and "idle for" in m for m in said), said
