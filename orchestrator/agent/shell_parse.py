"""What a shell command line runs, as far as it can be known without running it.

The permission gate matches ``Bash(...)`` rules against the commands this module
finds: every simple command of a line (lists, pipelines, subshells, ``{ …; }``,
``if``/``for``/``while``/``case`` bodies, function bodies, command and process
substitutions, substitutions in redirections and unquoted here-documents), and
inside each one the command a *wrapper* runs — ``bash -c '…'`` (and sh, zsh, dash,
ksh…), ``env``, ``command``, ``builtin``, ``exec``, ``nice``, ``nohup``,
``timeout``, ``stdbuf``, ``time``, ``sudo``/``doas``/``su -c``, ``xargs``,
``find -exec/-execdir/-ok/-okdir``, ``eval``, ``trap``, ``watch``, ``flock``,
``setsid``, ``ionice``, ``taskset``, ``chroot``, ``busybox``… — recursively.

Words are taken at their static value (quotes and backslashes removed, so
``'r'm`` and ``\\rm`` are ``rm``); a word holding an expansion, a substitution or
an unquoted glob/brace pattern is *unknown*. What cannot be decided statically
is reported as a reason (`Command.opaque`, `Analysis.problems`): an unknown word
in the command position, ``eval`` of unknown words, ``source``/``.``, a shell
reading its commands from stdin, ``alias``/``hash -p`` (they change what a name
runs), a wrapper option this module does not know, input the parser rejects.

Parsed with tree-sitter-bash: a complete grammar of bash (``case``, ``[[ ]]``,
arithmetic, here-documents, functions) in C, error-tolerant — a line with a
syntax error still yields the commands it could read (so deny rules still
apply) and is flagged as unparseable.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tree_sitter import Language, Node

Word = str | None
"""A word's static value; None when it is only known at run time."""
Match = Literal["yes", "maybe", "no"]

MAX_CHARS = 100_000
MAX_DEPTH = 8
"""Nested ``bash -c``/``eval`` strings parsed at most this deep."""
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "posh",
                    "rbash", "ksh93", "pdksh", "busybox-sh"})
OPAQUE_BUILTINS = {
    "source": "source runs a file's commands in this shell",
    ".": ". runs a file's commands in this shell",
    "alias": "alias changes what a name runs",
    "enable": "enable changes what a builtin name runs",
}
RISKY_ASSIGNMENTS = frozenset({"PATH", "BASH_ENV", "ENV", "IFS", "SHELLOPTS", "BASHOPTS",
                               "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PS4",
                               "PROMPT_COMMAND", "GLOBIGNORE"})
"""Assignments in front of a command that change which program runs or what the
shell executes: an allow rule never covers a command carrying one."""


@dataclass(frozen=True)
class Wrapper:
    """How to find the command a wrapper program runs: its options (anything else
    starting with ``-`` makes the call opaque), operands before the command."""

    with_arg: frozenset[str] = frozenset()
    flags: frozenset[str] = frozenset()
    no_command: frozenset[str] = frozenset()
    """Options after which the wrapper runs nothing (``command -v``, ``sudo -l``)."""
    operands: int = 0
    assignments: bool = False
    escalates: bool = False
    """Runs its command as another user: the inner command matching an allow rule
    does not allow the wrapper."""
    numeric_flags: bool = False
    default: tuple[str, ...] = ()
    open_tail: bool = False


def _w(with_arg: str = "", flags: str = "", no_command: str = "", **kw: object) -> Wrapper:
    return Wrapper(frozenset(with_arg.split()), frozenset(flags.split()),
                   frozenset(no_command.split()), **kw)  # type: ignore[arg-type]


WRAPPERS: dict[str, Wrapper] = {
    "env": _w("-u --unset -C --chdir -S --split-string",
              "-i --ignore-environment -0 --null -v --debug - --default-signal "
              "--ignore-signal --block-signal --list-signal-handling", assignments=True),
    "command": _w("", "-p", "-v -V"),
    "builtin": _w(),
    "exec": _w("-a", "-c -l"),
    "nohup": _w(),
    "nice": _w("-n --adjustment", "", numeric_flags=True),
    "timeout": _w("-s --signal -k --kill-after",
                  "--foreground --preserve-status -v --verbose -f -p", operands=1),
    "stdbuf": _w("-i -o -e --input --output --error"),
    "time": _w("-f --format -o --output",
               "-p -a --append -v --verbose -q --quiet --portability"),
    "coproc": _w(),
    "sudo": _w("-u --user -g --group -C --close-from -D --chdir -h --host -p --prompt "
               "-r --role -t --type -U --other-user -T --command-timeout -R --chroot",
               "-E --preserve-env -H --set-home -n --non-interactive -S --stdin -b "
               "--background -i --login -s --shell -k --reset-timestamp -P "
               "--preserve-groups -A --askpass -B --bell -N --no-update",
               "-l --list -v --validate -e --edit -K --remove-timestamp -V --version",
               assignments=True, escalates=True),
    "doas": _w("-u -C", "-n -s", escalates=True),
    "xargs": _w("-a --arg-file -d --delimiter -E -I -L --max-lines -n --max-args -P "
                "--max-procs -s --max-chars --process-slot-var",
                "-0 --null -r --no-run-if-empty -t --verbose -p --interactive -x --exit "
                "-o --open-tty", "--help --version", default=("echo",), open_tail=True),
    "watch": _w("-n --interval -q --equexit", "-t --no-title -b --beep -e --errexit -g "
                "--chgexit -c --color -x --exec -p --precise -d --differences -w --no-wrap"),
    "setsid": _w("", "-c --ctty -f --fork -w --wait"),
    "flock": _w("-w --timeout -E --conflict-exit-code",
                "-s --shared -x -e --exclusive -n --nb --nonblock -o --close -F "
                "--no-fork --verbose", "-u --unlock", operands=1),
    "ionice": _w("-c --class -n --classdata", "-t --ignore", "-p --pid -P --pgid -u --uid"),
    "taskset": _w("", "-a --all-tasks", "-p --pid -c --cpu-list", operands=1),
    "chroot": _w("--userspec --groups", "--skip-chdir", operands=1),
    "unbuffer": _w(),
    "busybox": _w(),
    "caffeinate": _w("-t -w", "-d -i -m -s -u"),
    "chrt": _w("-T -P -D", "-a --all-tasks -b --batch -d --deadline -f --fifo -i --idle "
               "-o --other -r --rr -R --reset-on-fork -v --verbose", "-p --pid -m --max",
               operands=1),
}


@dataclass
class Command:
    """One simple command: its words, the commands it runs (a wrapper's inner
    command, a ``bash -c`` string's commands) and why what it runs is unknown."""

    words: tuple[Word, ...]
    runs: list[Command] = field(default_factory=list)
    opaque: str | None = None
    escalates: bool = False
    open_tail: bool = False
    """More arguments are added at run time (``xargs``, ``find -exec … +``)."""
    transparent: bool = False
    """All it does is run `runs` (a wrapper, ``bash -c``, ``eval``), so it is allowed
    when they are; ``find -exec`` is not (find itself may ``-delete``)."""
    assigns: tuple[str, ...] = ()

    @property
    def name(self) -> str | None:
        """The program's name: ``/bin/rm``, ``./rm`` and ``\\rm`` are all ``rm``."""
        first = self.words[0] if self.words else None
        return None if first is None else program_name(first)

    def text(self) -> str:
        return " ".join("…" if w is None else w for w in self.words) + (
            " …" if self.open_tail else "")

    def walk(self) -> Iterator[Command]:
        yield self
        for inner in self.runs:
            yield from inner.walk()

    def matches(self, spec: str, *, by_name: bool) -> Match:
        """Whether this command matches a Bash rule's specifier: ``yes``, ``no``, or
        ``maybe`` when an unknown word or run-time arguments could make it match.
        ``by_name``: compare programs by name (deny/ask rules), not as written."""
        if not self.words:
            return "no"
        spec = " ".join(spec.split())
        words = list(self.words)
        if by_name:
            words[0] = self.name
            head, _, rest = spec.partition(" ")
            spec = " ".join(filter(None, [program_name(head), rest]))
        if spec.endswith(":*") or "*" not in spec:
            prefix = spec.endswith(":*")
            want = split_words(spec[:-2] if prefix else spec)
            if not want:
                return "yes"
            result: Match = "yes"
            for i, w in enumerate(want):
                if i >= len(words):
                    return "maybe" if self.open_tail else "no"
                if words[i] is None:
                    result = "maybe"
                elif words[i] != w:
                    return "no"
            if len(words) > len(want) and not prefix:
                return "no"
            if self.open_tail and not prefix:
                return "maybe"
            return result
        if None not in words and not self.open_tail:
            return "yes" if re.fullmatch(_glob(spec), " ".join(w or "" for w in words),
                                         re.DOTALL) else "no"
        head = (split_words(spec) or ["*"])[0]
        return "maybe" if words[0] is None or re.fullmatch(_glob(head), words[0]) else "no"


@dataclass
class Analysis:
    commands: list[Command]
    problems: list[str]
    """Why the line as a whole cannot be fully known (a parse error…)."""

    def walk(self) -> Iterator[Command]:
        for command in self.commands:
            yield from command.walk()

    def undecidable(self) -> list[str]:
        return self.problems + [f"{c.text()}: {c.opaque}" for c in self.walk() if c.opaque]


def line_matches(spec: str, line: str) -> bool:
    """Whether a command of ``line`` surely matches the Bash rule specifier ``spec``
    (programs compared by name, as deny and ask rules do)."""
    return any(c.matches(spec, by_name=True) == "yes" for c in analyze(line).walk())


def program_name(word: str) -> str:
    return word.rstrip("/").rsplit("/", 1)[-1] or word


def split_words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _glob(spec: str) -> str:
    return ".*".join(re.escape(s) for s in spec.split("*"))


def analyze(line: str, depth: int = 0) -> Analysis:
    """The commands a shell line runs, and what about it cannot be known."""
    if len(line) > MAX_CHARS:
        return Analysis([], [f"longer than {MAX_CHARS} characters"])
    if "\0" in line:
        return Analysis([], ["holds a NUL byte"])
    from tree_sitter import Parser

    parser = Parser(_language())
    texts = [line]
    if "\\\n" in line:  # tree-sitter keeps r\<newline>m as two words; bash joins them
        texts.append(line.replace("\\\n", ""))
    result = Analysis([], [])
    for text in texts:
        tree = parser.parse(text.encode("utf-8", "surrogateescape"))
        if tree.root_node.has_error and not result.problems:
            result.problems.append("the shell parser cannot read it")
        result.commands += _Reader(depth).commands(tree.root_node)
    return result


@cache
def _language() -> Language:
    import tree_sitter_bash
    from tree_sitter import Language

    return Language(tree_sitter_bash.language())


class _Reader:
    def __init__(self, depth: int) -> None:
        self.depth = depth

    def commands(self, root: Node) -> list[Command]:
        """Every command below ``root`` in source order, without recursion on the tree
        (a deeply nested line cannot exhaust Python's stack)."""
        out: list[Command] = []
        stack = [root]
        while stack:
            node = stack.pop()
            if node.type == "command":
                out.append(self.command(node))
            stack.extend(reversed(node.children))
        return out

    def command(self, node: Node) -> Command:
        assigns: list[str] = []
        words: list[Word] = []
        for child in node.children:
            if child.type == "variable_assignment":
                name = child.child_by_field_name("name")
                assigns.append(_text(name) if name is not None else "")
            elif child.type == "command_name":
                words.append(word_value(child.children[0]) if child.children else None)
            elif child.type not in _NOT_WORDS and not child.type.endswith("redirect"):
                words.append(word_value(child))
        return self.expand(Command(tuple(words), assigns=tuple(assigns)))

    def expand(self, cmd: Command) -> Command:
        """Fill in what ``cmd`` runs (for wrappers, shells, eval…)."""
        name = cmd.name
        if name is None:
            cmd.opaque = "the command name is only known at run time"
            return cmd
        if self.depth >= MAX_DEPTH:
            cmd.opaque = "nested too deep"
            return cmd
        args = list(cmd.words[1:])
        if name in OPAQUE_BUILTINS and (name != "alias" or any(
                w is None or "=" in w for w in args)) and (name != "enable" or args):
            cmd.opaque = OPAQUE_BUILTINS[name]
        elif name == "hash" and "-p" in args:
            cmd.opaque = "hash -p changes what a name runs"
        elif name == "eval":
            self.run_string(cmd, args, "eval")
        elif name == "trap":
            operands = [a for a in args if a is None or not a.startswith("-")]
            if len(operands) >= 2 and operands[0] != "-":
                self.run_string(cmd, operands[:1], "trap")
        elif name in SHELLS:
            self.shell(cmd, args)
        elif name == "su":
            self.su(cmd, args)
        elif name == "find":
            self.find(cmd, args)
        elif name in WRAPPERS:
            self.wrapper(cmd, WRAPPERS[name], args)
        return cmd

    def run_string(self, cmd: Command, words: list[Word], what: str) -> None:
        if any(w is None for w in words):
            cmd.opaque = f"{what} of words only known at run time"
            return
        inner = analyze(" ".join(w for w in words if w is not None), self.depth + 1)
        cmd.runs, cmd.transparent = inner.commands, what != "trap"
        if inner.problems:
            cmd.opaque = f"{what}: {'; '.join(inner.problems)}"

    def shell(self, cmd: Command, args: list[Word]) -> None:
        i, string = 0, False
        while i < len(args):
            a = args[i]
            if a is None:
                cmd.opaque = "shell option only known at run time"
                return
            if a == "--" or a == "-":
                i += 1
                break
            if a in ("--rcfile", "--init-file"):
                i += 2
                continue
            if a.startswith("--"):
                i += 1
                continue
            if not a.startswith(("-", "+")):
                break
            string |= "c" in a[1:]
            if "s" in a[1:]:
                cmd.opaque = "the shell reads its commands from stdin"
                return
            i += 2 if ("o" in a[1:] or "O" in a[1:]) else 1
        if string:
            if i >= len(args):
                cmd.opaque = "shell -c without a command"
            else:
                self.run_string(cmd, args[i:i + 1], "shell -c")
        elif i >= len(args) or args[i] in ("-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"):
            cmd.opaque = "the shell reads its commands from stdin"

    def su(self, cmd: Command, args: list[Word]) -> None:
        cmd.escalates = True
        for i, a in enumerate(args):
            if a in ("-c", "--command") and i + 1 < len(args):
                self.run_string(cmd, args[i + 1:i + 2], "su -c")
                return
            if a is not None and a.startswith("--command="):
                self.run_string(cmd, [a.partition("=")[2]], "su -c")
                return
        cmd.opaque = "su runs a login shell reading its commands from stdin"

    def find(self, cmd: Command, args: list[Word]) -> None:
        i = 0
        while i < len(args):
            if args[i] in ("-exec", "-execdir", "-ok", "-okdir"):
                end = i + 1
                while end < len(args) and args[end] not in (";", "+"):
                    end += 1
                inner = [None if w is not None and "{}" in w else w for w in args[i + 1:end]]
                if inner:
                    cmd.runs.append(self.expand(Command(
                        tuple(inner), open_tail=end < len(args) and args[end] == "+")))
                i = end
            i += 1

    def wrapper(self, cmd: Command, spec: Wrapper, args: list[Word]) -> None:
        cmd.escalates = spec.escalates
        assigns: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            if a is None:
                cmd.opaque = "a wrapper's option is only known at run time"
                return
            if a == "--":
                i += 1
                break
            if spec.assignments and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", a):
                assigns.append(a.partition("=")[0])
                i += 1
                continue
            if not a.startswith("-") or (a == "-" and "-" not in spec.flags):
                break
            if cmd.name == "env" and (a.startswith("-S") or a.startswith("--split-string")):
                self.env_split(cmd, args, i)
                return
            step = self.option(cmd, spec, args, i)
            if step is None:
                return
            i += step
        i += spec.operands
        inner = tuple(args[i:]) or spec.default
        if cmd.name == "flock" and inner and inner[0] in ("-c", "--command"):
            self.run_string(cmd, list(inner[1:2]), "flock -c")
            return
        if inner:
            cmd.transparent = True
            cmd.runs.append(self.expand(Command(inner, open_tail=spec.open_tail,
                                                assigns=tuple(assigns))))

    def env_split(self, cmd: Command, args: list[Word], i: int) -> None:
        """``env -S 'cmd args' more``: the string is split into words like a shell would."""
        a = args[i] or ""
        value: Word
        if a.startswith("-S") and len(a) > 2:
            value, rest = a[2:], args[i + 1:]
        elif "=" in a:
            value, rest = a.partition("=")[2], args[i + 1:]
        else:
            value, rest = (args[i + 1] if i + 1 < len(args) else ""), args[i + 2:]
        if value is None or None in rest:
            cmd.opaque = "env -S with words only known at run time"
            return
        self.run_string(cmd, [value, *(shlex.quote(w) for w in rest if w is not None)], "env -S")

    def option(self, cmd: Command, spec: Wrapper, args: list[Word], i: int) -> int | None:
        """How many words the option at ``args[i]`` takes; None when the wrapper runs
        nothing or the option is unknown (then ``cmd.opaque`` says so)."""
        a = args[i] or ""
        if a.startswith("--"):
            name, eq, _ = a.partition("=")
            if name in spec.no_command:
                return None
            if name in spec.with_arg:
                return 1 if eq else 2
            if name in spec.flags:
                return 1
            cmd.opaque = f"unknown option {name} of {cmd.name}"
            return None
        if spec.numeric_flags and a[1:].isdigit():
            return 1
        if a in spec.flags:
            return 1
        for j, ch in enumerate(a[1:], start=1):
            opt = "-" + ch
            if opt in spec.no_command:
                return None
            if opt in spec.with_arg:
                return 1 if j + 1 < len(a) else 2
            if opt not in spec.flags:
                cmd.opaque = f"unknown option {opt} of {cmd.name}"
                return None
        return 1


_NOT_WORDS = frozenset({"variable_assignment", "command_name", "comment", "ERROR"})


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "surrogateescape")


def word_value(node: Node) -> Word:
    """A word's value after quote removal, or None when it is only known at run time
    (expansions, substitutions, unquoted glob or brace patterns)."""
    marked = _marked(node)
    if marked is None or _is_pattern(marked):
        return None
    return re.sub(r"\\(.)", r"\1", marked, flags=re.DOTALL)


def _marked(node: Node) -> str | None:
    """The word's characters with every quoted or escaped one written ``\\c``."""
    kind, text = node.type, _text(node)
    if kind in ("word", "number"):
        return re.sub(r"\\\n", "", text)
    if kind == "raw_string":
        return "".join("\\" + c for c in text[1:-1])
    if kind == "ansi_c_string":
        return None if "\\" in text else "".join("\\" + c for c in text[2:-1])
    if kind == "string":
        parts = []
        for child in node.children:
            if child.type == '"':
                continue
            if child.type != "string_content":
                return None
            body = re.sub(r"\\([$`\"\\\n])", r"\1", _text(child)).replace("\\\n", "")
            parts.append("".join("\\" + c for c in body))
        return "".join(parts)
    if kind == "concatenation":
        pieces = [_marked(c) for c in node.children]
        return None if any(p is None for p in pieces) else "".join(p or "" for p in pieces)
    return None


def _is_pattern(marked: str) -> bool:
    plain = re.sub(r"\\.", "\0", marked, flags=re.DOTALL)
    if "*" in plain or "?" in plain:
        return True
    if re.search(r"\[[^\]]+\]", plain):
        return True
    return re.search(r"\{[^{}]*(,|\.\.)[^{}]*\}", plain) is not None
