"""Shell completion of `kubectl vm`: the tree read from the plugin's parser, what completes a
word, kubectl's `kubectl_complete-vm` answer, and the bash/zsh scripts (syntax-checked by bash,
then run by it against a stub `kubectl`)."""

from __future__ import annotations

import io
import shutil
import subprocess
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from libvirt_provider import constants as c
from libvirt_provider.adapters.plugin import completion as shell
from libvirt_provider.adapters.plugin.kubectl_vm import build_parser, complete_main, main
from libvirt_provider.console.completion import (
    DIRECTIVE_DEFAULT,
    DIRECTIVE_NO_FILES,
    Request,
    Values,
    Where,
    bash_script,
    cobra_answer,
    plan,
    tree_of,
    zsh_script,
)

TREE = tree_of(build_parser())
COMMANDS = (
    "console",
    "top",
    "vnc",
    "screenshot",
    "port-forward",
    "ssh",
    "migrate",
    "drain",
    "completion",
)


def test_the_tree_has_every_command_of_the_parser() -> None:
    assert tuple(x.name for x in TREE.commands) == COMMANDS
    assert set(TREE.top.flags()) == {"-h", "--help", "--kubeconfig", "--context"}


def test_migrate_completes_its_options_and_a_machine_then_a_host() -> None:
    migrate = TREE.command("migrate")
    assert migrate is not None
    assert set(migrate.flags()) >= {"--to", "-n", "--namespace", "--wait", "--timeout"}
    to = migrate.option("--to")
    assert to is not None
    assert to.values is Values.HOSTS
    wait = migrate.option("--wait")
    assert wait is not None
    assert wait.values is None
    assert [a.values for a in migrate.arguments] == [Values.MACHINES]


def test_an_empty_line_completes_the_commands() -> None:
    request = plan(TREE, [""])
    assert request.answer() == list(COMMANDS)
    assert request.directive() == DIRECTIVE_NO_FILES
    assert plan(TREE, ["m"]).answer() == ["migrate"]


def test_a_dash_completes_the_options_of_the_command_or_the_global_ones() -> None:
    assert plan(TREE, ["migrate", "--w"]).answer() == ["--wait"]
    assert plan(TREE, ["--k"]).answer() == ["--kubeconfig"]


def test_a_name_is_looked_up_where_the_line_says() -> None:
    request = plan(TREE, ["--kubeconfig=/k", "--context", "lab", "migrate", "-n", "team-a", "w"])
    assert request.values is Values.MACHINES
    assert request.where == Where(namespace="team-a", kubeconfig="/k", context="lab")
    assert request.answer(["web", "db", "worker"]) == ["web", "worker"]


def test_option_values_complete_hosts_files_or_nothing() -> None:
    assert plan(TREE, ["migrate", "web", "--to", ""]).values is Values.HOSTS
    assert plan(TREE, ["migrate", "web", "--timeout", ""]).values is Values.NOTHING
    shot = plan(TREE, ["screenshot", "web", "-o", ""])
    assert shot.values is Values.FILES
    assert shot.directive() == DIRECTIVE_DEFAULT
    assert plan(TREE, ["console", "--namespace", ""]).values is Values.NAMESPACES


def test_positional_arguments_after_the_last_complete_nothing() -> None:
    assert plan(TREE, ["migrate", "web", ""]).values is Values.NOTHING
    assert plan(TREE, ["port-forward", "web", ""]).values is Values.NOTHING
    assert plan(TREE, ["nonsense", ""]).answer(["web"]) == []


def test_ssh_keeps_the_user_in_front_of_the_machine() -> None:
    request = plan(TREE, ["ssh", "root@w"])
    assert request.answer(["web", "db"]) == ["root@web"]


def test_completion_completes_its_shells() -> None:
    assert plan(TREE, ["completion", ""]).answer() == ["bash", "zsh"]


def test_kubectls_answer_is_one_candidate_a_line_then_the_directive() -> None:
    assert cobra_answer(["a", "b"], DIRECTIVE_NO_FILES) == "a\nb\n:4\n"
    assert cobra_answer([], DIRECTIVE_DEFAULT) == ":0\n"


def test_kubectl_complete_vm_answers_with_the_listed_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[Request] = []

    def names(request: Request) -> list[str]:
        asked.append(request)
        return ["db", "web"]

    monkeypatch.setattr(shell, "_names", names)
    out = io.StringIO()
    with redirect_stdout(out):
        assert complete_main(["migrate", "-n", "team-a", "w"]) == 0
    assert out.getvalue() == "web\n:4\n"
    assert asked[0].where.namespace == "team-a"


def test_kubectl_complete_vm_answers_nothing_when_the_cluster_is_unreachable(
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        complete_main([f"--kubeconfig={tmp_path / 'missing'}", "console", ""])
    assert out.getvalue() == ":4\n"


def _script(shell_name: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["completion", shell_name]) == 0
    return out.getvalue()


def test_the_scripts_name_every_command_and_option_of_the_parser() -> None:
    for script in (bash_script(TREE), zsh_script(TREE)):
        for command in TREE.commands:
            assert command.name in script
            for flag in command.flags():
                assert flag in script
        assert "complete -F _kubectl_vm kubectl-vm" in script
        assert f"{c.MACHINE_PLURAL}.{c.GROUP}" in script
    assert zsh_script(TREE).startswith("#compdef kubectl-vm\n")
    assert "bashcompinit" in zsh_script(TREE)
    assert _script("bash") == bash_script(TREE)
    assert _script("zsh") == zsh_script(TREE)


@pytest.mark.parametrize("shell_name", ["bash", "zsh"])
def test_bash_parses_the_scripts(tmp_path: Path, shell_name: str) -> None:
    """`bash -n`; the zsh script too, since past its zsh-only preamble it is the bash one."""
    path = tmp_path / f"kubectl-vm.{shell_name}"
    path.write_text(_script(shell_name))
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    if shell_name == "zsh" and shutil.which("zsh"):
        done = subprocess.run(["zsh", "-n", str(path)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr


def _complete(tmp_path: Path, line: list[str]) -> tuple[list[str], str]:
    """Run the bash script's completion for `kubectl-vm LINE...` (the last word being typed)
    against a stub `kubectl` that lists two machines and records its arguments."""
    script = tmp_path / "kubectl-vm.bash"
    script.write_text(_script("bash"))
    calls = tmp_path / "calls"
    words = " ".join(f"'{w}'" for w in ["kubectl-vm", *line])
    program = f"""
kubectl() {{ echo "$@" >> {calls}; printf '%s\\n' thing.example/web thing.example/db; }}
source {script}
COMP_WORDS=({words})
COMP_CWORD={len(line)}
_kubectl_vm
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return [x for x in done.stdout.splitlines() if x], (calls.read_text() if calls.exists() else "")


def test_bash_completes_commands_options_and_machine_names(tmp_path: Path) -> None:
    assert _complete(tmp_path, ["mi"])[0] == ["migrate"]
    assert _complete(tmp_path, ["migrate", "--ti"])[0] == ["--timeout"]
    assert _complete(tmp_path, ["completion", ""])[0] == ["bash", "zsh"]
    names, calls = _complete(tmp_path, ["--context", "lab", "migrate", "-n", "team-a", "w"])
    assert names == ["web"]
    assert f"get {c.MACHINE_PLURAL}.{c.GROUP} --context lab --namespace team-a -o name" in calls
    assert _complete(tmp_path, ["ssh", "root@d"])[0] == ["root@db"]
    assert _complete(tmp_path, ["migrate", "web", "--timeout", ""])[0] == []
