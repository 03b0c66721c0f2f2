"""What a shell command line runs, as far as it can be known without running it.

The permission gate matches ``Bash(...)`` rules against the commands this module
finds: every simple command of a line (lists, pipelines, subshells, ``{ …; }``,
``if``/``for``/``while``/``case`` bodies, function bodies, command and process
substitutions, substitutions in redirections and unquoted here-documents), and
inside each one the command a *wrapper* runs — ``bash -c '…'`` (and sh, zsh, dash,
ksh…), ``env``, ``command``, ``builtin``, ``exec``, ``nice``, ``nohup``,
``timeout``, ``stdbuf``, ``time``, ``sudo``/``doas``/``su -c``, ``xargs``,
``find -exec/-execdir/-ok/-okdir``, ``eval``, ``trap``, ``watch``, ``flock``,
``setsid``, ``ionice``, ``taskset``, ``chroot``, ``busybox``, ``unshare``,
``setpriv``, ``prlimit``, ``runuser``, ``script -c``, ``sg``, ``setarch`` (and
``linux32``/``linux64``), ``nsenter``, ``strace``, ``ltrace``, ``fakeroot``,
``systemd-run``, ``pkexec``… — recursively. A wrapper that runs a shell when given
no command (``unshare``, ``nsenter``, ``setarch``) is read as running ``sh`` from
stdin, which cannot be known.

Words are taken at their static value (quotes and backslashes removed, so
``'r'm`` and ``\\rm`` are ``rm``); a word holding an expansion, a substitution or
an unquoted glob/brace pattern is *unknown*. What cannot be decided statically
is reported as a reason (`Command.opaque`, `Analysis.problems`): an unknown word
in the command position, ``eval`` of unknown words, ``source``/``.``, a shell
reading its commands from stdin, ``alias``/``hash -p`` (they change what a name
runs), a wrapper option this module does not know, input the parser rejects —
and every place where bash evaluates a string as code although it looks like
data (fail closed: an allow rule never covers a line holding one):

- arithmetic on anything but literal numbers (``$((x))``, ``(( x ))``, ``let``,
  ``for ((…))``, ``$[x]``, an array subscript ``${a[i]}``, a substring offset
  ``${x:n}``, ``[[ x -eq y ]]``): a value such as ``a[$(rm x)]`` runs ``rm x``;
- builtins that assign to or test a variable *named* by a word, when the name has
  a subscript or is unknown (``printf -v``, ``read``, ``declare``/``typeset``/
  ``local``/``export``/``readonly``, ``unset``, ``getopts``, ``mapfile``, ``wait -p``,
  ``test -v``/``[[ -v ]]``), ``declare -n``/``-i``, ``mapfile -C``, ``compgen``,
  ``fc``; prompt expansion ``${x@P}`` and indirection ``${!x}``. The options of
  these builtins are read as bash's getopt reads them (`getopt`, from bash's own
  option strings in `GETOPT_BUILTINS`), so ``printf -v'a[…]'`` and ``hash -rp``
  are the same options as ``printf -v 'a[…]'`` and ``hash -p``;
- assignments to variables that change what runs or what the shell executes
  (`risky_name`: ``PATH``, ``PS4``, ``BASH_ALIASES``, ``BASH_CMDS``, ``BASH_FUNC_*``…),
  in front of a command, on their own, or by a builtin (``read``, ``printf -v``…),
  a ``for``/``select`` loop, ``${X:=…}`` or ``coproc NAME``.

Parsed with tree-sitter-bash: a complete grammar of bash (``case``, ``[[ ]]``,
arithmetic, here-documents, functions) in C, error-tolerant — a line with a
syntax error still yields the commands it could read (so deny rules still
apply) and is flagged as unparseable. Where it reads differently from bash, the
line is unknown too: a substitution it left as text (``${x:-`cmd`}``), an
unquoted here-document holding ``$(``, ``${``, ``$[`` or a backquote (it misses
backquotes and substitutions after a tab there), a reserved word read as a
command (``! for …``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Literal, NamedTuple

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
    "let": "let evaluates its words as arithmetic",
    "compgen": "compgen evaluates its word lists and runs its -C/-F commands",
    "fc": "fc runs commands from the history",
}
HARMLESS_USES: dict[str, Callable[[list[Word]], bool]] = {
    "alias": lambda args: all(a is not None and "=" not in a for a in args),  # lists
    "enable": lambda args: not args,  # lists the builtins
}
"""Calls of an `OPAQUE_BUILTINS` name that change nothing."""
RISKY_ASSIGNMENTS = frozenset({"PATH", "BASH_ENV", "ENV", "IFS", "SHELLOPTS", "BASHOPTS",
                               "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PS0", "PS1",
                               "PS2", "PS3", "PS4", "PROMPT_COMMAND", "GLOBIGNORE",
                               "BASH_ALIASES", "BASH_CMDS", "BASH_LOADABLES_PATH",
                               "EXECIGNORE", "BASH_XTRACEFD", "BASH_COMPAT"})
"""Assignments that change which program runs or what the shell executes (see
`risky_name`): an allow rule never covers a line carrying one."""


def risky_name(name: str) -> bool:
    """Whether assigning ``name`` changes what runs: `RISKY_ASSIGNMENTS`, exported
    functions (``BASH_FUNC_ls%%``) and ``LD_*`` loader variables."""
    return (name in RISKY_ASSIGNMENTS or name.startswith(("BASH_FUNC_", "LD_"))
            or name == "")


class Builtin(NamedTuple):
    """A builtin that names variables (bash evaluates a name with a subscript,
    ``a[$(rm x)]``, as arithmetic, running what it holds) or otherwise changes what
    runs, read with bash's own option string as bash's getopt reads it."""

    optstring: str | None
    """As in bash's source (``a:`` takes a value); None: the builtin takes no options."""
    naming: str = ""
    """Options whose value names a variable."""
    operands: slice = slice(0)
    """The operands that name variables."""
    unsafe: tuple[tuple[str, str], ...] = ()
    """Options that run code or change what a name runs, and why."""


_MAPFILE = Builtin("d:u:n:O:tC:c:s:", operands=slice(None), unsafe=(("C", "runs a callback"),))
GETOPT_BUILTINS = {
    "read": Builtin("ersa:d:i:n:N:p:t:u:", naming="a", operands=slice(None)),
    "mapfile": _MAPFILE,
    "readarray": _MAPFILE,
    "printf": Builtin("v:", naming="v"),
    "wait": Builtin("fnp:", naming="p"),
    "getopts": Builtin(None, operands=slice(1, 2)),
    "hash": Builtin("dlp:rt", unsafe=(("p", "changes what a name runs"),)),
}
DECLARES = frozenset({"declare", "typeset", "local", "export", "readonly", "unset"})
"""Builtins whose every word (but options) names a variable."""
RESERVED = frozenset({"if", "then", "else", "elif", "fi", "case", "esac", "for", "select",
                      "while", "until", "do", "done", "in", "function", "{", "}", "[[", "]]",
                      "!"})
"""Words bash never runs as a command (``time`` and ``coproc`` are read as wrappers):
tree-sitter-bash reading one as a command name (``! for …``) misread the line."""
ARITHMETIC_TOKENS = frozenset({"number", "binary_expression", "unary_expression",
                               "parenthesized_expression", "ternary_expression"})
ARITHMETIC_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})


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
    """What it runs when given no command, if not `IDLE_ALONE` nor ``sh``."""
    open_tail: bool = False
    leading: int = 0
    """Operands before the options (``setarch ARCH -R cmd``)."""
    splits: frozenset[str] = frozenset()
    """Options whose value is a command line, split into words (``env -S``)."""
    through_shell: bool = False
    """Runs its words joined as one ``sh -c`` string (``watch``)."""
    replaces: frozenset[str] = frozenset()
    """Options whose value, in the command's words, is replaced by input (``xargs -I``)."""
    loads: frozenset[str] = frozenset()
    """Options whose value names a program, library or environment the wrapper loads
    (``strace -o '|cmd'``, ``fakeroot --faked``): the call is unknown, and its command
    is still read (a deny rule still sees it)."""


_SETARCH = ("-B --32bit -F --fdpic-funcptrs -I --short-inode -L --addr-compat-layout -R "
            "--addr-no-randomize -S --whole-seconds -T --sticky-timeouts -X "
            "--read-implies-exec -Z --mmap-page-zero -3 --3gb --4gb --uname-2.6 -v --verbose")


def _w(with_arg: str = "", flags: str = "", no_command: str = "", loads: str = "",
       **kw: object) -> Wrapper:
    """An option left out is unknown (so the call is): ``sudo -A``, ``nsenter -W``."""
    return Wrapper(frozenset(with_arg.split()), frozenset(flags.split()),
                   frozenset(no_command.split()), loads=frozenset(loads.split()),
                   **kw)  # type: ignore[arg-type]


IDLE_ALONE = frozenset({"env", "command", "builtin", "exec", "nohup", "nice", "timeout",
                        "stdbuf", "time", "watch", "setsid", "flock", "ionice",
                        "taskset", "chrt", "prlimit", "setpriv", "strace", "ltrace",
                        "valgrind", "dbus-run-session", "runcon"})
"""Wrappers that run nothing when given no command (each tried on Linux). Any other
wrapper given none is read as running ``sh`` reading stdin, as ``fakeroot``,
``chroot DIR``, ``sudo -s``, ``unshare`` and ``nsenter`` do."""


WRAPPERS: dict[str, Wrapper] = {
    "env": _w("-u --unset -C --chdir", "-i --ignore-environment -0 --null -v --debug - "
              "--default-signal --ignore-signal --block-signal --list-signal-handling",
              assignments=True, splits=frozenset({"-S", "--split-string"})),
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
    "sudo": _w("-u --user -g --group -C --close-from -D --chdir -h --host -p --prompt "
               "-r --role -t --type -U --other-user -T --command-timeout -R --chroot",
               "-E --preserve-env -H --set-home -n --non-interactive -S --stdin -b "
               "--background -i --login -s --shell -k --reset-timestamp -P "
               "--preserve-groups -B --bell -N --no-update",
               "-l --list -v --validate -K --remove-timestamp -V --version",
               assignments=True, escalates=True),
    "doas": _w("-u -C", "-n -s", escalates=True),
    "xargs": _w("-a --arg-file -d --delimiter -E -I -L -n --max-args -P --max-procs -s "
                "--max-chars --process-slot-var", "-0 --null -r --no-run-if-empty -t --verbose "
                "-p --interactive -x --exit -o --open-tty --max-lines", "--help --version",
                default=("echo",), open_tail=True, replaces=frozenset({"-I"})),
    "watch": _w("-n --interval -q --equexit", "-t --no-title -b --beep -e --errexit -g "
                "--chgexit -c --color -x --exec -p --precise -d --differences -w --no-wrap",
                through_shell=True),
    "setsid": _w("", "-c --ctty -f --fork -w --wait"),
    "flock": _w("-w --timeout -E --conflict-exit-code",
                "-s --shared -x -e --exclusive -n --nb --nonblock -o --close -F "
                "--no-fork --verbose -u --unlock", operands=1),
    "ionice": _w("-c --class -n --classdata", "-t --ignore", "-p --pid -P --pgid -u --uid"),
    "taskset": _w("", "-a --all-tasks -c --cpu-list", "-p --pid", operands=1),
    "chroot": _w("--userspec --groups", "--skip-chdir", operands=1),
    "unbuffer": _w(),
    "busybox": _w(),
    "caffeinate": _w("-t -w", "-d -i -m -s -u"),
    "chrt": _w("-T -P -D", "-a --all-tasks -b --batch -d --deadline -f --fifo -i --idle "
               "-o --other -r --rr -R --reset-on-fork -v --verbose", "-p --pid -m --max",
               operands=1),
    "unshare": _w("--propagation --setgroups -S --setuid -G --setgid --monotonic --boottime "
                  "-R --root -w --wd --map-user --map-group --map-users --map-groups",
                  "-m --mount -u --uts -i --ipc -n --net -p --pid -U --user -C --cgroup -T "
                  "--time -f --fork -r --map-root-user -c --map-current-user --map-auto "
                  "--kill-child --mount-proc --keep-caps", "-h --help -V --version"),
    "setpriv": _w("--ambient-caps --inh-caps --bounding-set --ruid --euid --rgid --egid "
                  "--reuid --regid --groups --securebits --pdeathsig --selinux-label "
                  "--apparmor-profile --landlock-access --landlock-rule",
                  "--nnp --no-new-privs --clear-groups --keep-groups --init-groups "
                  "--reset-env", "-d --dump -h --help -V --version", escalates=True),
    "nsenter": _w("-t --target -S --setuid -G --setgid",
                  "-a --all -m --mount -u --uts -i --ipc -n --net -p --pid -C --cgroup -U "
                  "--user -T --time --preserve-credentials -r --root -w --wd -F --no-fork "
                  "-Z --follow-context", "-h --help -V --version", escalates=True),
    "prlimit": _w("-o --output", "--noheadings --raw --verbose -c --core -d --data -e --nice "
                  "-f --fsize -i --sigpending -l --memlock -m --rss -n --nofile -q "
                  "--msgqueue -r --rtprio -s --stack -t --cpu -u --nproc -v --as -x --locks "
                  "-y --rttime", "-p --pid -h --help -V --version"),
    "runuser": _w("-u --user -w --whitelist-environment -g --group -G --supp-group -s "
                  "--shell", "-m -p --preserve-environment -l --login -f --fast -P --pty",
                  "-h --help -V --version", escalates=True),
    "setarch": _w("", _SETARCH, "--list -h --help -V --version", leading=1),
    "linux32": _w("", _SETARCH, "-h --help -V --version"),
    "linux64": _w("", _SETARCH, "-h --help -V --version"),
    "strace": _w("-e -p -s -u -a -b -I -O -S -X -P",
                 "-f -ff -c -C -d -D -F -i -k -n -q -qq -r -t -tt -ttt -T -v -w -x -xx -y "
                 "-yy -Z -z", "-h -V", loads="-o -E"),
    "ltrace": _w("-e -o -p -s -u -a -A -D -F -l -n -x -L",
                 "-b -c -C -f -i -r -S -t -tt -ttt -T -w", "-h -V"),
    "fakeroot": _w("-s -i -b", "-u --unknown-is-real", "-h -v --version",
                   loads="-l --lib --faked"),
    "eatmydata": _w(),
    "nocache": _w(),
    "catchsegv": _w(),
    "valgrind": _w(),
    "firejail": _w(),
    "bwrap": _w(),
    "dbus-run-session": _w(loads="--config-file --dbus-daemon"),
    "torsocks": _w("-u --user -p --pass -a --address -P --port",
                   "-i --isolate -q --quiet -d --debug"),
    "proxychains": _w("-f", "-q"),
    "proxychains4": _w("-f", "-q"),
    "faketime": _w("-p -f", "-m --exclude-monotonic --disable-shm", operands=1),
    "numactl": _w("-N --cpunodebind -C --physcpubind -m --membind -p --preferred -i "
                  "--interleave", "-a --all -l --localalloc", "-s --show -H --hardware"),
    "xvfb-run": _w("-e --error-file -f --auth-file -n --server-num -p --xauth-protocol -s "
                   "--server-args -w --wait", "-a --auto-servernum -l --listen-tcp"),
    "pkexec": _w("--user", "--disable-internal-agent --keep-cwd", escalates=True),
    "systemd-run": _w("-u --unit -d --description --slice --uid "
                      "--gid -M --machine -H --host --on-active --on-boot --on-calendar",
                      "--user --system --scope -r --remain-after-exit -t --pty -P --pipe -G "
                      "--collect -q --quiet --wait --no-block --same-dir", escalates=True,
                      loads="-p --property -E --setenv"),
    "runcon": _w("-u -r -t -l", "-c --compute"),
    "cgexec": _w("-g", "--sticky"),
    "chpst": _w("-u -U -b -/ -n -l -L -m -d -o -p -f -c -r -t", "-v -P -0 -1 -2",
                escalates=True, loads="-e"),
    "cpulimit": _w("-l --limit", "-z --lazy -i --include-children -v --verbose -q --quiet "
                   "-k --kill -r --restore -f --foreground -b --background",
                   "-p --pid -e --exe -P --path"),
    "trickle": _w("-d -u -w -t -l -n", "-s -v"),
    "chronic": _w("", "-e -v"),
    "ifne": _w("", "-n"),
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
        if spec.endswith(":*"):
            return self._starts_with(split_words(spec[:-2]), words, prefix=True)
        if "*" not in spec:
            return self._starts_with(split_words(spec), words, prefix=False)
        if None not in words and not self.open_tail:
            return "yes" if re.fullmatch(_glob(spec), " ".join(w or "" for w in words),
                                         re.DOTALL) else "no"
        head = (split_words(spec) or ["*"])[0]
        return "maybe" if words[0] is None or re.fullmatch(_glob(head), words[0]) else "no"

    def _starts_with(self, want: list[str], words: list[Word], *, prefix: bool) -> Match:
        """``words`` are ``want`` (and, for a ``prefix`` rule, more)."""
        if not want:
            return "yes"
        head = words[:len(want)]
        if any(w is not None and w != x for w, x in zip(head, want, strict=False)):
            return "no"
        if len(words) < len(want):
            return "maybe" if self.open_tail else "no"
        if not prefix and len(words) > len(want):
            return "no"
        return "maybe" if None in head or (self.open_tail and not prefix) else "yes"


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
        reader = _Reader(depth)
        result.commands += reader.commands(tree.root_node)
        result.problems += [p for p in reader.problems if p not in result.problems]
    return result


@cache
def _language() -> Language:
    import tree_sitter_bash
    from tree_sitter import Language

    return Language(tree_sitter_bash.language())


class _Reader:
    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.problems: list[str] = []
        """Places of the line where bash evaluates a string as code (see the module)."""

    def commands(self, root: Node) -> list[Command]:
        """Every command below ``root`` in source order, without recursion on the tree
        (a deeply nested line cannot exhaust Python's stack)."""
        out: list[Command] = []
        stack = [root]
        while stack:
            node = stack.pop()
            if node.type == "command":
                out.append(self.command(node))
            elif _backquoted(node):  # bash unescapes \` \$ \\ in it, then parses it
                inner = analyze(re.sub(r"\\([$`\\])", r"\1", _text(node)[1:-1]), self.depth + 1)
                out += inner.commands
                self.problems += inner.problems
                continue
            why = _evaluates(node)
            if why is not None:
                self.problems.append(f"{_text(node)[:60]}: {why}")
            stack.extend(reversed(node.children))
        return out

    def command(self, node: Node) -> Command:
        assigns: list[str] = []
        words: list[Word] = []
        for child in node.children:
            if child.type == "variable_assignment":
                assigns.append(_assigned(child))
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
        elif name in RESERVED:
            cmd.opaque = f"{name} is a reserved word, not a command: the line was misread"
        elif self.depth >= MAX_DEPTH:
            cmd.opaque = "nested too deep"
        else:
            args = list(cmd.words[1:])
            cmd.opaque = _unsafe_builtin(name, args)
            if cmd.opaque is None and name in _RUNS:
                _RUNS[name](self, cmd, args)
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
        self.command_option(cmd, args, "su -c",
                            "su runs a login shell reading its commands from stdin")

    def runuser(self, cmd: Command, args: list[Word]) -> None:
        """``runuser -u USER cmd…`` wraps a command; without ``-u`` it is su."""
        if {"-u", "--user"}.isdisjoint(args):
            self.su(cmd, args)
        else:
            self.wrapper(cmd, args)

    def script(self, cmd: Command, args: list[Word]) -> None:
        self.command_option(cmd, args, "script -c",
                            "script runs a shell reading its commands from the terminal")

    def sg(self, cmd: Command, args: list[Word]) -> None:
        cmd.escalates = True
        rest = [a for a in args[1:] if a != "-c"] if args and args[0] != "-" else []
        if rest:
            self.run_string(cmd, rest[:1], "sg")
        else:
            cmd.opaque = "sg runs a shell reading its commands from stdin"

    def coproc(self, cmd: Command, args: list[Word]) -> None:
        """``coproc cmd…`` or ``coproc [NAME] { cmd…; }`` (tree-sitter-bash reads its
        words up to the first ``;``, then the rest of the braces as commands)."""
        if args[1:2] == ["{"]:
            cmd.opaque = _names_badly("coproc", args[:1])
            args = args[1:]
        inner = tuple(args[1:] if args[:1] == ["{"] else args)
        if inner and not cmd.opaque:
            cmd.transparent = True
            cmd.runs.append(self.expand(Command(inner)))

    def trap(self, cmd: Command, args: list[Word]) -> None:
        operands = [a for a in args if a is None or not a.startswith("-")]
        if len(operands) >= 2 and operands[0] != "-":
            self.run_string(cmd, operands[:1], "trap")

    def command_option(self, cmd: Command, args: list[Word], what: str, otherwise: str) -> None:
        """The commands of a ``-c STRING`` / ``--command=STRING`` option (``-lc`` too);
        ``otherwise`` is why nothing can be known without one."""
        for i, a in enumerate(args):
            if a is not None and re.fullmatch(r"-[A-Za-z]*c|--command", a) and i + 1 < len(args):
                self.run_string(cmd, args[i + 1:i + 2], what)
                return
            if a is not None and a.startswith("--command="):
                self.run_string(cmd, [a.partition("=")[2]], what)
                return
        cmd.opaque = otherwise

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

    def wrapper(self, cmd: Command, args: list[Word]) -> None:
        spec = WRAPPERS[cmd.name or ""]
        cmd.escalates = spec.escalates
        found = self.wrapped(cmd, spec, args)
        if found is None:
            return
        start, assigns = found
        inner = _replaced(spec, args[:start], tuple(args[start + spec.operands:]))
        if not inner and cmd.open_tail:
            cmd.opaque = f"{cmd.name} runs a command given at run time"
            return
        inner = inner or spec.default or (() if cmd.name in IDLE_ALONE else ("sh",))
        if cmd.name == "flock" and inner[:1] in (("-c",), ("--command",)):
            self.run_string(cmd, list(inner[1:2]), "flock -c")
        elif spec.through_shell and inner:
            self.run_string(cmd, list(inner), f"{cmd.name} (sh -c)")
        elif inner:
            cmd.transparent = True
            cmd.runs.append(self.expand(Command(inner, open_tail=spec.open_tail,
                                                assigns=tuple(assigns))))

    def wrapped(self, cmd: Command, spec: Wrapper, args: list[Word]
                ) -> tuple[int, list[str]] | None:
        """Where the wrapped command starts in ``args`` (before `Wrapper.operands`) and
        the variables the wrapper sets for it; None when that cannot be known (then
        ``cmd.opaque`` says why) or was read already (``env -S``)."""
        assigns: list[str] = []
        i = spec.leading if args[:1] and args[0] is not None and args[0][:1] != "-" else 0
        while i < len(args):
            a = args[i]
            if a is None:
                cmd.opaque = "a wrapper's option is only known at run time"
                return None
            if a == "--":
                return i + 1, assigns
            if spec.assignments and re.match(r"[A-Za-z_][A-Za-z0-9_%]*=", a):
                assigns.append(a.partition("=")[0])
                if risky_name(assigns[-1]):
                    cmd.opaque = f"{cmd.name} sets {assigns[-1]}, which changes what runs"
                    return None
                i += 1
                continue
            if not a.startswith("-") or (a == "-" and "-" not in spec.flags):
                break
            step = self.option(cmd, spec, args, i)
            if step is None:
                return None
            i += step
        return i, assigns

    def env_split(self, cmd: Command, args: list[Word], value: Word) -> None:
        """``env -S 'cmd args' more``: the string (``value``, or else the next word) is
        split into words as a shell would, and the words after it follow."""
        if value is None:
            value, args = (args[0] if args else ""), args[1:]
        if value is None or None in args:
            cmd.opaque = "env -S with words only known at run time"
            return
        self.run_string(cmd, [value, *(shlex.quote(w) for w in args if w is not None)], "env -S")

    def option(self, cmd: Command, spec: Wrapper, args: list[Word], i: int) -> int | None:
        """How many words the option at ``args[i]`` takes; None when the wrapper runs
        nothing, its command was in the option (``env -S``) or the option is unknown
        (then ``cmd.opaque`` says so)."""
        a = args[i] or ""
        if (spec.numeric_flags and a[1:].isdigit()) or a in spec.flags:
            return 1
        for opt, attached in _options_in(a):
            if opt in spec.no_command:
                return None
            if opt in spec.splits:
                self.env_split(cmd, args[i + 1:], attached)
                return None
            if opt in spec.loads:
                cmd.opaque = f"{opt} of {cmd.name} names what it loads or runs"
            if opt in spec.with_arg | spec.loads:
                return 1 if attached is not None else 2
            if opt not in spec.flags:
                cmd.opaque = f"unknown option {opt} of {cmd.name}"
                return None
        return 1


def _replaced(spec: Wrapper, options: list[Word], inner: tuple[Word, ...]
              ) -> tuple[Word, ...]:
    """``inner`` with each word holding a string `Wrapper.replaces` names (any value one
    of ``options`` may give it) unknown: input takes its place at run time."""
    found = {attached if attached is not None else next(iter(options[k + 1:k + 2]), "")
             for k, word in enumerate(options) if word is not None
             for opt, attached in _options_in(word) if opt in spec.replaces}
    if None in found:
        return tuple(None for _ in inner)
    return tuple(None if w is None or any(r in w for r in found if r is not None) else w
                 for w in inner)


def _options_in(word: str) -> list[tuple[str, str | None]]:
    """The options one word holds, each with the value attached to it: ``--name=v``,
    or letters ``-abv`` (a letter's value would be the rest of the word)."""
    if word.startswith("--"):
        name, eq, value = word.partition("=")
        return [(name, value if eq else None)]
    return [("-" + ch, word[j + 1:] or None) for j, ch in enumerate(word[1:], start=1)]


_RUNS: dict[str, Callable[[_Reader, Command, list[Word]], None]] = {
    **dict.fromkeys(WRAPPERS, _Reader.wrapper),
    **dict.fromkeys(SHELLS, _Reader.shell),
    "eval": lambda reader, cmd, args: reader.run_string(cmd, args, "eval"),
    "trap": _Reader.trap,
    "coproc": _Reader.coproc,
    "su": _Reader.su,
    "runuser": _Reader.runuser,
    "script": _Reader.script,
    "sg": _Reader.sg,
    "find": _Reader.find,
}
"""Commands that run other commands, and how to find them."""

def _backquoted(node: Node) -> bool:
    """A backquoted substitution holding a backslash: tree-sitter-bash reads an escaped
    backquote or dollar in it as text, where bash unescapes it and reads what follows
    as a nested substitution."""
    return (node.type == "command_substitution" and node.children[:1] != []
            and node.children[0].type == "`" and "\\" in _text(node))


_NOT_WORDS = frozenset({"variable_assignment", "command_name", "comment", "ERROR"})


def _assigned(node: Node) -> str:
    """The variable a ``variable_assignment`` node assigns (``a`` of ``a[0]=1``)."""
    name = node.child_by_field_name("name")
    if name is not None and name.type == "subscript":
        name = name.child_by_field_name("name") or name.children[0]
    return _text(name) if name is not None else ""


_ARITH = ("arithmetic on values only known at run time (bash evaluates a value such as "
          "a[$(cmd)] as code)")


def _evaluates(node: Node) -> str | None:
    """Why bash may run code held in a string or a value at ``node``; None when it
    cannot (see the module's docstring for the forms)."""
    check = _EVALUATORS.get(node.type)
    return None if check is None else check(node)


def _arithmetic(nodes: list[Node]) -> str | None:
    return None if _literal(nodes) else _ARITH


def _double_parens(node: Node) -> str | None:
    kids = node.children
    if node.type == "compound_statement" and (not kids or kids[0].type != "(("):
        return None  # { …; }
    return _arithmetic(kids[1:-1])


def _c_style_for(node: Node) -> str | None:
    head = [k for k in node.children if k.type not in ("do_group", "compound_statement")]
    return _arithmetic(head[2:])


def _subscript(node: Node) -> str | None:
    index = [k for k in node.children[2:-1] if k.type != "]"]
    return None if _text_of(index) in ("@", "*") else _arithmetic(index)


def _expansion(node: Node) -> str | None:
    kids = node.children
    types = [k.type for k in kids]
    if types[1:2] == ["!"]:
        return "indirect expansion ${!x} uses a name held in a value"
    if any(t == "@" and _text(kids[i + 1]) == "P" for i, t in enumerate(types[:-1])):
        return "prompt expansion ${x@P} runs the substitutions a value holds"
    if ":" in types:
        return _arithmetic([k for k in kids[types.index(":") + 1:-1] if k.type != ":"])
    if {":=", "="} & set(types) and "variable_name" in types:  # ${X:=value} assigns X
        return _names_badly("${X:=…}", [_text(kids[types.index("variable_name")])])
    return None


def _unread(node: Node) -> str | None:
    """A piece tree-sitter-bash left as text although bash expands it: a substitution
    inside ``${x:-`cmd`}``, the right side of ``[[ … ]]`` after a wrapper…"""
    if re.search(r"\$\(|`", re.sub(r"\\.", "", _text(node), flags=re.DOTALL)):
        return "a substitution the shell parser did not read"
    return None


def _heredoc(node: Node) -> str | None:
    """An unquoted here-document expands its body, and tree-sitter-bash misses some of
    it (backquotes, a substitution after a tab): any ``$(``, ``${``, ``$[`` or backquote
    in the body is unknown. A quoted delimiter (``<<'EOF'``) keeps the body literal. A
    body that does not end at its delimiter was misread (``cat <<EOF; cmd``)."""
    parts = {k.type: _text(k) for k in node.children}
    start = parts.get("heredoc_start", "")
    if parts.get("heredoc_end") != re.sub(r"[\"'\\]", "", start):
        return "a here-document the shell parser misread"
    if re.search(r"[\"'\\]", start):
        return None
    if re.search(r"\$[({\[]|`", re.sub(r"\\.", "", parts.get("heredoc_body", ""), flags=re.DOTALL)):
        return "a here-document whose substitutions the shell parser may not read"
    return None


def _loop_variable(node: Node) -> str | None:
    """``for NAME in …`` and ``select NAME in …`` assign NAME."""
    name = node.child_by_field_name("variable")
    return _names_badly(_text(node.children[0]), [_text(name)]) if name else None


def _tests_a_name(node: Node) -> str | None:
    if node.children and _text(node.children[0]) in ("-v", "-R"):
        return "[[ -v ]] evaluates a subscript of the name it tests"
    return None


def _compares_numbers(node: Node) -> str | None:
    kids = node.children
    if not any(k.type == "test_operator" and _text(k) in ARITHMETIC_TESTS for k in kids):
        return None
    return _arithmetic([k for k in kids if k.type != "test_operator"])


def _assigns_risky(node: Node) -> str | None:
    name = _assigned(node)
    return f"assigning {name or 'a name'} changes what runs" if risky_name(name) else None


def _declaration(node: Node) -> str | None:
    kids = node.children
    words = [_assigned(k) if k.type == "variable_assignment" else word_value(k)
             for k in kids[1:]]
    return _declares_unsafely(_text(kids[0]), words) if kids else None


_EVALUATORS: dict[str, Callable[[Node], str | None]] = {
    "arithmetic_expansion": _double_parens,  # $(( … ))
    "compound_statement": _double_parens,  # (( … ))
    "c_style_for_statement": _c_style_for,  # for (( … ))
    "for_statement": _loop_variable,  # for NAME in, select NAME in
    "heredoc_redirect": _heredoc,  # <<EOF … EOF
    **dict.fromkeys(("word", "regex", "string_content", "extglob_pattern"), _unread),
    "subscript": _subscript,  # ${a[i]}, a[i]=…
    "expansion": _expansion,  # ${!x}, ${x@P}, ${x:n}
    "unary_expression": _tests_a_name,  # [[ -v x ]]
    "binary_expression": _compares_numbers,  # [[ x -eq y ]]
    "variable_assignment": _assigns_risky,  # PATH=…
    "declaration_command": _declaration,  # declare, local, export…
    "unset_command": _declaration,
}
"""The nodes where bash may evaluate a value as code, and how to tell whether it does."""


def _literal(nodes: list[Node]) -> bool:
    """Whether the arithmetic ``nodes`` hold only numbers and operators."""
    stack = list(nodes)
    while stack:
        n = stack.pop()
        if n.is_named and n.type not in ARITHMETIC_TOKENS:
            return False
        if n.type == "number" and not re.fullmatch(r"[0-9]+|0[xX][0-9a-fA-F]+", _text(n)):
            return False  # 10#$x, base#digits with expansions
        stack.extend(n.children)
    return True


def _text_of(nodes: list[Node]) -> str:
    return "".join(_text(n) for n in nodes)


def _unsafe_builtin(name: str, args: list[Word]) -> str | None:
    """Why the builtin ``name`` called with ``args`` makes what the line runs unknown
    (it evaluates a value as code, names a variable it may evaluate, changes what a
    name runs); None when it does not, or is no such builtin."""
    if name in GETOPT_BUILTINS:
        return _options_unsafely(name, GETOPT_BUILTINS[name], args)
    if name in ("test", "["):
        return _test_unsafely(name, args)
    if name in DECLARES:
        return _declares_unsafely(name, args)
    harmless = HARMLESS_USES.get(name)
    return None if harmless and harmless(args) else OPAQUE_BUILTINS.get(name)


def getopt(optstring: str | None, args: list[Word]
           ) -> tuple[list[tuple[str, Word]], list[Word]] | None:
    """``args`` read as bash's builtins read them: the options with their values
    (``-vNAME``, ``-v NAME``, ``-rv NAME``), and the operands after the first word
    that is no option (or after ``--``). None when a word where an option may stand
    is only known at run time. A letter ``optstring`` does not know is read as a flag:
    bash refuses the call, so only more words are read as options."""
    options: list[tuple[str, Word]] = []
    i = 0
    while optstring is not None and i < len(args):
        word = args[i]
        if word is None:
            return None
        if word == "--":
            i += 1
            break
        if word[:1] != "-" or word == "-":
            break
        i += 1
        for j, letter in enumerate(word[1:], start=2):
            if letter + ":" not in optstring:
                options.append((letter, None))
                continue
            value: Word = word[j:]
            if not value and i < len(args):
                value, i = args[i], i + 1
            options.append((letter, value))
            break
    return options, args[i:]


def _options_unsafely(name: str, spec: Builtin, args: list[Word]) -> str | None:
    read = getopt(spec.optstring, args)
    if read is None:
        return f"{name} has a word only known at run time"
    options, operands = read
    letters = {letter for letter, _ in options}
    for letter, why in spec.unsafe:
        if letter in letters:
            return f"{name} -{letter} {why}"
    named = [value for letter, value in options if letter in spec.naming]
    return _names_badly(name, named + operands[spec.operands])


def _test_unsafely(name: str, args: list[Word]) -> str | None:
    """``test``/``[``: ``-v`` evaluates a subscript, and an operator only known at run
    time may be ``-v``."""
    if name == "[" and args[-1:] == ["]"]:
        args = args[:-1]
    if "-v" in args or "-R" in args:
        return f"{name} -v evaluates a subscript of the name it tests"
    operators = {0: [], 1: [], 2: args[:1], 3: args[1:2]}.get(len(args), args)
    return f"{name} with an operator only known at run time" if None in operators else None


def _declares_unsafely(name: str, args: list[Word]) -> str | None:
    """`DECLARES`: ``-n``/``-i`` make later values names or arithmetic; a risky name
    changes what runs."""
    if any(a is not None and a[:1] in "-+" and ("n" in a or "i" in a) for a in args):
        return f"{name} -n/-i makes later values evaluate as names or arithmetic"
    return _names_badly(name, [None if a is None else a.partition("=")[0] for a in args
                               if a is None or a[:1] not in "-+"])


def _names_badly(name: str, names: list[Word]) -> str | None:
    """Why ``names``, variables ``name`` assigns or tests, may run code: unknown, with
    a subscript, or `risky_name`."""
    if None in names:
        return f"{name} names a variable only known at run time"
    if any(n and risky_name(n) for n in names):
        return f"{name} assigns a variable that changes what runs"
    if any("[" in n for n in names if n):
        return f"{name} names a variable with a subscript, which bash evaluates as code"
    return None


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
