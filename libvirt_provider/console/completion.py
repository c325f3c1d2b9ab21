"""Shell completion for `kubectl vm`, derived from its argparse parser.

Why derived: the plugin's commands and options are declared once, in the parser; the bash and
zsh scripts (`kubectl vm completion bash|zsh`) and the answers of `kubectl_complete-vm` (the
executable kubectl >= 1.26 runs to complete a plugin's arguments, in cobra's `__complete`
format) are all generated from the same `Tree`, so a new command or option completes without
anyone editing a script.

What is completed: the commands, each command's options (and the global ones before the
command), the values of options that name a LibvirtHost or a file or have choices, and each
positional argument: LibvirtMachine names (of the namespace given with -n, else the kubeconfig's),
`[USER@]NAME` keeping the user, or the argument's choices. Listing machines or hosts needs the
API server: the scripts ask `kubectl get`, the executable the kubernetes client; both are shells.
"""

from __future__ import annotations

import argparse
import enum
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from libvirt_provider import constants as c

__all__ = [
    "DIRECTIVE_DEFAULT",
    "DIRECTIVE_NO_FILES",
    "Command",
    "Option",
    "Request",
    "Tree",
    "Values",
    "Where",
    "bash_script",
    "cobra_answer",
    "plan",
    "tree_of",
    "zsh_script",
]

# Cobra's shell-completion directives, as kubectl reads them from a plugin's last line.
DIRECTIVE_DEFAULT = 0  # the shell may complete file names
DIRECTIVE_NO_FILES = 4  # ShellCompDirectiveNoFileComp

# Positional arguments and option values that name something to look up, by their dest.
_MACHINE_DESTS = frozenset({"name", "target"})
_HOST_DESTS = frozenset({"to", "host"})
_FILE_DESTS = frozenset({"kubeconfig", "output"})
_NAMESPACE_DESTS = frozenset({"namespace"})


class Values(enum.StrEnum):
    """What a word is completed with."""

    NOTHING = "none"
    MACHINES = "machines"
    HOSTS = "hosts"
    NAMESPACES = "namespaces"
    FILES = "files"
    CHOICES = "choices"


# What is listed from the API server rather than known from the parser.
_LISTED = frozenset({Values.MACHINES, Values.HOSTS, Values.NAMESPACES})


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    values: Values | None = None  # None: a switch, it takes no value
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Argument:
    values: Values
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Command:
    name: str
    options: tuple[Option, ...]
    arguments: tuple[Argument, ...]

    def flags(self) -> list[str]:
        return [f for o in self.options for f in o.flags]

    def option(self, flag: str) -> Option | None:
        return next((o for o in self.options if flag in o.flags), None)


@dataclass(frozen=True)
class Tree:
    """The global options (before a command) and the commands."""

    top: Command
    commands: tuple[Command, ...]

    def command(self, name: str) -> Command | None:
        return next((x for x in self.commands if x.name == name), None)


def _values(action: argparse.Action) -> tuple[Values, tuple[str, ...]]:
    if action.choices:
        return Values.CHOICES, tuple(str(x) for x in action.choices)
    if action.dest in _MACHINE_DESTS:
        return Values.MACHINES, ()
    if action.dest in _HOST_DESTS:
        return Values.HOSTS, ()
    if action.dest in _FILE_DESTS:
        return Values.FILES, ()
    if action.dest in _NAMESPACE_DESTS:
        return Values.NAMESPACES, ()
    return Values.NOTHING, ()


def _command(name: str, parser: argparse.ArgumentParser) -> Command:
    options: list[Option] = []
    arguments: list[Argument] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        values, choices = _values(action)
        if action.option_strings:
            takes = action.nargs != 0
            options.append(Option(tuple(action.option_strings), values if takes else None, choices))
        else:
            arguments.append(Argument(values, choices))
    return Command(name, tuple(options), tuple(arguments))


def tree_of(parser: argparse.ArgumentParser) -> Tree:
    """The completion tree of a parser with subcommands."""
    commands: list[Command] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                commands.append(_command(name, sub))
    return Tree(_command("", parser), tuple(commands))


@dataclass(frozen=True)
class Where:
    """Where names are looked up, as typed so far (None: the kubeconfig's defaults)."""

    namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None


@dataclass(frozen=True)
class Request:
    """What the word being typed is completed with: `candidates` as they are, and, when
    `values` is MACHINES, HOSTS or NAMESPACES, the names listed `where` the command line says."""

    values: Values
    prefix: str
    candidates: tuple[str, ...] = ()
    keep: str = ""  # typed before the name and kept in front of each candidate (`USER@`)
    where: Where = Where()

    def directive(self) -> int:
        return DIRECTIVE_DEFAULT if self.values is Values.FILES else DIRECTIVE_NO_FILES

    def answer(self, names: Iterable[str] = ()) -> list[str]:
        """The candidates that fit what is typed, listed names included."""
        listed = list(names) if self.values in _LISTED else []
        pool = list(self.candidates) + listed
        return [self.keep + x for x in pool if x.startswith(self.prefix)]


def plan(tree: Tree, words: Sequence[str]) -> Request:
    """What completes the last of `words` (the arguments after `kubectl vm`; the last is the
    word being typed, maybe empty)."""
    done, current = list(words[:-1]), (words[-1] if words else "")
    command: Command | None = None
    position = 0
    pending: Option | None = None
    seen: dict[str, str] = {}
    for word in done:
        scope = command or tree.top
        if pending is not None:
            seen[pending.flags[-1]] = word
            pending = None
            continue
        if word.startswith("-") and word != "-":
            flag, has_value, value = word.partition("=")
            option = scope.option(flag)
            if option is not None and option.values is not None:
                if has_value:
                    seen[option.flags[-1]] = value
                else:
                    pending = option
            continue
        if command is None:
            command = tree.command(word)
            if command is None:
                return Request(Values.NOTHING, current)
        else:
            position += 1
    where = Where(seen.get("--namespace"), seen.get("--kubeconfig"), seen.get("--context"))
    if pending is not None:
        return _values_request(pending.values, pending.choices, current, where)
    if current.startswith("-"):
        scope = command or tree.top
        return Request(Values.CHOICES, current, tuple(scope.flags()), where=where)
    if command is None:
        return Request(Values.CHOICES, current, tuple(x.name for x in tree.commands), where=where)
    if position >= len(command.arguments):
        return Request(Values.NOTHING, current)
    argument = command.arguments[position]
    return _values_request(argument.values, argument.choices, current, where)


def _values_request(
    values: Values | None, choices: tuple[str, ...], current: str, where: Where
) -> Request:
    if values is Values.MACHINES and "@" in current:
        user, _, rest = current.partition("@")
        return Request(Values.MACHINES, rest, keep=user + "@", where=where)
    return Request(values or Values.NOTHING, current, choices, where=where)


def cobra_answer(candidates: Iterable[str], directive: int) -> str:
    """What kubectl reads from `kubectl_complete-vm`: one candidate a line, then `:directive`."""
    return "".join(f"{x}\n" for x in candidates) + f":{directive}\n"


# -- the scripts ----------------------------------------------------------------------------------


def _words(items: Iterable[str]) -> str:
    return shlex.quote(" ".join(items))


def _kind(values: Values | None, choices: tuple[str, ...]) -> str:
    if values is Values.CHOICES:
        return "choices:" + " ".join(choices)
    return str(values or Values.NOTHING)


def _cases(rows: Iterable[tuple[str, str]]) -> str:
    return "".join(
        f"        {shlex.quote(key)}) echo {shlex.quote(value)} ;;\n" for key, value in rows
    )


def _bash_functions(tree: Tree) -> str:
    flags = [(x.name, " ".join(x.flags())) for x in (tree.top, *tree.commands)]
    values = [
        (f"{x.name}:{flag}", _kind(o.values, o.choices))
        for x in (tree.top, *tree.commands)
        for o in x.options
        if o.values is not None
        for flag in o.flags
    ]
    arguments = [
        (f"{x.name}:{i}", _kind(a.values, a.choices))
        for x in tree.commands
        for i, a in enumerate(x.arguments)
    ]
    machines = f"{c.MACHINE_PLURAL}.{c.GROUP}"
    hosts = f"{c.HOST_PLURAL}.{c.GROUP}"
    commands = _words(x.name for x in tree.commands)
    return f"""_kubectl_vm_commands() {{
    echo {commands}
}}

# The options of a command ("" is before any command).
_kubectl_vm_flags() {{
    case "$1" in
{_cases(flags)}    esac
}}

# What an option's value is (nothing printed: the option takes none).
_kubectl_vm_value() {{
    case "$1:$2" in
{_cases(values)}    esac
}}

# What a command's positional argument (counted from 0) is.
_kubectl_vm_argument() {{
    case "$1:$2" in
{_cases(arguments)}    esac
}}

# Names of a kind, with the kubeconfig, context and namespace typed so far.
_kubectl_vm_names() {{
    local -a how=()
    [[ -n $_kvm_kubeconfig ]] && how+=(--kubeconfig "$_kvm_kubeconfig")
    [[ -n $_kvm_context ]] && how+=(--context "$_kvm_context")
    case $1 in
        machines)
            [[ -n $_kvm_namespace ]] && how+=(--namespace "$_kvm_namespace")
            kubectl get {machines} "${{how[@]}}" -o name --request-timeout=5s 2>/dev/null ;;
        hosts) kubectl get {hosts} "${{how[@]}}" -o name --request-timeout=5s 2>/dev/null ;;
        namespaces) kubectl get namespaces "${{how[@]}}" -o name --request-timeout=5s 2>/dev/null ;;
    esac | sed 's|.*/||'
}}

_kubectl_vm() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} command="" position=0 pending="" kind word i keep=""
    local _kvm_namespace="" _kvm_kubeconfig="" _kvm_context=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${{COMP_WORDS[i]}}
        if [[ -n $pending ]]; then
            case $pending in
                -n | --namespace) _kvm_namespace=$word ;;
                --kubeconfig) _kvm_kubeconfig=$word ;;
                --context) _kvm_context=$word ;;
            esac
            pending=""
            continue
        fi
        case $word in
            --*=*)
                case ${{word%%=*}} in
                    --namespace) _kvm_namespace=${{word#*=}} ;;
                    --kubeconfig) _kvm_kubeconfig=${{word#*=}} ;;
                    --context) _kvm_context=${{word#*=}} ;;
                esac
                ;;
            -?*) [[ -n $(_kubectl_vm_value "$command" "$word") ]] && pending=$word ;;
            *)
                if [[ -z $command ]]; then
                    command=$word
                else
                    position=$((position + 1))
                fi
                ;;
        esac
    done
    if [[ -n $pending ]]; then
        kind=$(_kubectl_vm_value "$command" "$pending")
    elif [[ $cur == -* ]]; then
        kind="choices:$(_kubectl_vm_flags "$command")"
    elif [[ -z $command ]]; then
        kind="choices:$(_kubectl_vm_commands)"
    else
        kind=$(_kubectl_vm_argument "$command" "$position")
    fi
    local IFS=$'\\n'
    case $kind in
        machines)
            if [[ $cur == *@* ]]; then
                keep=${{cur%%@*}}@
                cur=${{cur#*@}}
            fi
            COMPREPLY=($(compgen -P "$keep" -W "$(_kubectl_vm_names machines)" -- "$cur")) ;;
        hosts | namespaces) COMPREPLY=($(compgen -W "$(_kubectl_vm_names "$kind")" -- "$cur")) ;;
        files) COMPREPLY=($(compgen -f -- "$cur")) ;;
        choices:*)
            IFS=$' \\t\\n'
            COMPREPLY=($(compgen -W "${{kind#choices:}}" -- "$cur")) ;;
        *) COMPREPLY=() ;;
    esac
}}
"""


_HEADER = """\
# {shell} completion for `kubectl-vm` (the libvirt provider's kubectl plugin), generated from its
# options by `kubectl vm completion {shell}`. `kubectl vm <TAB>` itself is completed by kubectl
# (>= 1.26) through the `kubectl_complete-vm` executable installed beside `kubectl-vm`.
"""


def bash_script(tree: Tree) -> str:
    """A bash script completing the `kubectl-vm` command: source it from ~/.bashrc."""
    return (
        _HEADER.format(shell="bash")
        + "\n"
        + _bash_functions(tree)
        + "\ncomplete -F _kubectl_vm kubectl-vm\n"
    )


def zsh_script(tree: Tree) -> str:
    """The same for zsh, through zsh's bash-completion emulation (bashcompinit)."""
    return (
        "#compdef kubectl-vm\n"
        + _HEADER.format(shell="zsh")
        + "\n(( $+functions[compdef] )) || { autoload -U +X compinit && compinit; }\n"
        + "autoload -U +X bashcompinit && bashcompinit\n\n"
        + _bash_functions(tree)
        + "\ncomplete -F _kubectl_vm kubectl-vm\n"
    )
