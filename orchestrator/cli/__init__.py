"""The command line: a thin layer over the library.

Errors we raise on purpose (`OrchestratorError`) print one line on stderr and
exit 1; usage errors exit 2 (typer/click); anything unexpected prints one line
too, with the full traceback only when ``ORCH_DEBUG=1``.

Start-up is lazy: a command's module (and what it imports) is imported only when
that command runs, and ``--version``, ``--help`` and an unknown command or option
are answered from `COMMANDS` without importing typer at all.

**Adding a command**: write it as before, a typer function registered on ``app`` in
its module under ``orchestrator/cli/`` (``@app.command("land")``), then add one line
to `COMMANDS`::

    "land": ("review", "Merge the reviewed tasks in order, one at a time."),

(command name -> the module that registers it, and the one-line summary shown by
``orchestrator --help``). ``tests/test_cli_startup.py`` checks that the table and
the modules' registrations agree.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import typer
    import typer.models

#: command name -> (module under ``orchestrator.cli`` registering it, summary for --help).
#: One line per command, in the order ``orchestrator --help`` lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("board", "Create the board and the worktree folder, and keep them out of git status."),
    "add": ("board", "Add a task to the board."),
    "list": ("board", "List the tasks on the board, with any problem that keeps one from "
                      "starting."),
    "board": ("board", "Alias of list."),
    "show": ("board", "Show one task in full."),
    "cancel": ("board", "Cancel a task (a running one loses its lease; its worktree is kept)."),
    "events": ("board", "Print the board's event log, oldest first, each with its seq."),
    "worktrees": ("worktrees", "List the tasks' worktrees: branch, path, status, dirty or clean, "
                               "commits ahead, disk use."),
    "gc": ("worktrees", "Remove the worktrees and branches of merged, discarded and cancelled "
                        "tasks, when no work would be lost; say what was skipped and why."),
    "up": ("team", "Start the lead and its teammates (Ctrl-C once: warm stop, twice: stop now)."),
    "down": ("team", "Stop the running daemon (warm: running tasks finish their step and are "
                     "released)."),
    "status": ("team", "The daemon, what each teammate is doing, and the board counts."),
    "send": ("team", "Put a message in a teammate's mailbox (`shutdown_request` asks it to stop)."),
    "logs": ("team", "A task's transcript: the agent's text, tool calls and results, output, "
                     "checks, commits and costs."),
    "approve": ("agent", "Allow the tool call (or the plan of a plan-first task) a waiting agent "
                         "asked about."),
    "deny": ("agent", "Refuse the tool call or plan a waiting agent asked about; it gets the "
                      "reason."),
    "demo": ("agent", "Build a sample repo with four tasks, run a scripted team on it, show the "
                      "review table."),
    "review": ("review", "Tasks awaiting review: branch, commits, diffstat, checks, cost, age, "
                         "overlaps."),
    "diff": ("review", "The task's changes against its base: paged and coloured on a terminal, "
                       "plain when piped."),
    "merge": ("review", "Merge a reviewed task (checked with git merge-tree first; refused on "
                        "conflicts)."),
    "discard": ("review", "Discard a task's work: remove its worktree and branch (fail-closed)."),
    "retry": ("review", "Send a task back to pending in the same worktree and branch, with "
                        "feedback."),
    "mcp": ("mcp", "Serve the board over MCP on stdio (claude mcp add orchestrator -- "
                   "orchestrator mcp), or over HTTP with --http."),
    "ui": ("ui", "Serve the board in the browser: live columns, review, what needs you (Ctrl-C "
                 "ends)."),
    "land": ("review", "Merge reviewed tasks one by one, each verified on its merge result before "
                       "the target moves (blockers first, then priority, then id)."),
    "resume": ("review", "Continue a task that waits after a budget or no-progress stop (same "
                         "worktree and conversation), or send it to review as it is."),
    "migrate": ("board", "Apply newer schema migrations to the PostgreSQL board ([board] url)."),
    "mcp-status": ("mcp", "Connect to each MCP server (.mcp.json, plugins) and show plugin → "
                          "server → tool, with each server's state, tools, resources and last "
                          "error."),
    "plan": ("settings", "The lead reads the repository and turns GOAL into tasks with "
                         "dependencies."),
    "enter": ("enter", "Open your shell in a task's worktree with the task's environment "
                       "(ORCH_TASK_ID, ORCH_PORT_BASE…); exit it to come back. `enter ID -- CMD` "
                       "runs one command there and exits with its status. The task itself is not "
                       "touched."),
    "config": ("settings", "Show and change settings (orchestrator.toml)."),
    "forge": ("forge", "The forge where the team reviews in pull requests: `forge check` says "
                       "what works, `forge sync` runs one pass."),
}

SHORT_LIVED = frozenset({"add", "list", "board", "show", "cancel", "status", "review"})
"""Commands that read the board and exit: they run without the cycle collector, whose
passes over the objects of a 50,000-task board cost a fifth of ``list`` (reference
counting still frees everything that is not in a cycle)."""

PROG = "orchestrator"
SUMMARY = "Run a team of coding agents on one git repository, one worktree per task."
ROOT_OPTIONS = (("--version", "Print the version."), ("--help", "Show this message and exit."))


def _load_commands(names: list[str] | None = None) -> None:
    """Import the modules registering ``names`` (default: every command) on ``app``."""
    wanted = COMMANDS if names is None else names
    for module in dict.fromkeys(COMMANDS[n][0] for n in wanted if n in COMMANDS):
        try:
            importlib.import_module(f"orchestrator.cli.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"orchestrator.cli.{module}":
                raise
    from orchestrator.cli.app import app

    _unwrap_help(app)


def _unwrap_help(group: typer.Typer) -> None:
    """Docstrings wrap at 100 columns; help is wrapped again to the terminal. Join the
    lines of each paragraph so the help does not break in ragged places."""
    for info in group.registered_commands:
        import inspect

        text = info.help or inspect.getdoc(info.callback) or ""
        info.help = "\n\n".join(" ".join(p.split()) for p in text.split("\n\n"))
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _unwrap_help(sub.typer_instance)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["mcp"]:
        from orchestrator.mcp.handshake import early

        early(args)  # answer initialize before anything heavy is imported
    _answer_without_typer(args)
    from orchestrator.errors import OrchestratorError

    if args[0] in SHORT_LIVED and "--watch" not in args:  # list --watch runs on
        import gc

        gc.disable()  # see SHORT_LIVED
    as_json = "--json" in args
    try:
        from orchestrator.cli import quick

        if quick.run(args):  # the everyday board commands, read without typer
            sys.exit(0)
        _load_commands(args[:1])  # args[0] is a known command: _answer_without_typer checked
        with _only(args[0]):
            if as_json:
                _run_for_json(args)
            from orchestrator.cli.app import app

            app(args=args, prog_name=PROG)  # click's standalone mode: usage errors exit 2
    except OrchestratorError as exc:
        _error(str(exc), type(exc).__name__, as_json)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("ORCH_DEBUG"):
            raise
        _error(f"{type(exc).__name__}: {exc} (ORCH_DEBUG=1 for the traceback)",
               type(exc).__name__, as_json)


@contextlib.contextmanager
def _only(name: str) -> Iterator[None]:
    """While a command runs, typer sees only that command: it builds (and reads the type
    hints of) the commands it is given, and a module registers several."""
    from orchestrator.cli.app import app

    commands, groups = app.registered_commands, app.registered_groups
    app.registered_commands = [c for c in commands if _name_of(c) == name]
    app.registered_groups = [g for g in groups if g.name == name]
    try:
        yield
    finally:
        app.registered_commands, app.registered_groups = commands, groups


def _name_of(info: typer.models.CommandInfo) -> str:
    callback = info.callback
    return info.name or (callback.__name__.replace("_", "-") if callback else "")


def _run_for_json(args: list[str]) -> NoReturn:
    """With ``--json``, usage errors are JSON on stderr too (exit 2)."""
    import typer

    from orchestrator.cli.app import app

    try:
        result = app(args=args, prog_name=PROG, standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:
        # typer's own click: a usage error has format_message() and exit code 2
        if getattr(exc, "exit_code", None) != 2 or not hasattr(exc, "format_message"):
            raise
        sys.stderr.write(json.dumps({"error": exc.format_message(), "type": "UsageError"})
                         + "\n")
        sys.exit(2)
    sys.exit(result if isinstance(result, int) else 0)


def _error(message: str, kind: str, as_json: bool) -> NoReturn:
    """One line on stderr, exit 1; with ``--json``, that line is a JSON object."""
    if as_json:
        sys.stderr.write(json.dumps({"error": message, "type": kind}) + "\n")
    else:
        sys.stderr.write(f"error: {message}\n")
    sys.exit(1)


def _answer_without_typer(args: list[str]) -> None:
    """``--version``, ``--help``, no arguments, an unknown command or root option: answer
    here and exit, in the look typer gives them, without importing typer (~0.15 s)."""
    if not args or args[0] in ("--help", "-h"):
        sys.stdout.write(_root_help())
        sys.stdout.flush()
        sys.exit(0 if args else 2)  # like click: no arguments shows the help and exits 2
    first = args[0]
    if first == "--version":
        from orchestrator import __version__

        sys.stdout.write(f"{PROG} {__version__}\n")
        sys.exit(0)
    if first.startswith("-"):
        name = first.split("=", 1)[0]
        _usage_error(f"No such option: {name}", _close(name, [o for o, _ in ROOT_OPTIONS]))
    if first not in COMMANDS:
        _usage_error(f"No such command {first!r}.", _close(first, list(COMMANDS)))


def _close(word: str, choices: list[str]) -> str:
    import difflib

    near = difflib.get_close_matches(word, choices)
    if not near:
        return ""
    if len(near) == 1:
        return f" Did you mean {near[0]!r}?"
    return " (Possible options: " + ", ".join(near) + ")"


def _usage_error(message: str, hint: str = "") -> None:
    sys.stderr.write(f"Usage: {PROG} [OPTIONS] COMMAND [ARGS]...\n"
                     f"Try '{PROG} --help' for help.\n"
                     + _panel("Error", [message + hint], _width()))
    sys.exit(2)


def _width() -> int:
    """typer's width: the terminal's (``COLUMNS`` first), at most 100; 80 when piped."""
    import shutil

    if os.environ.get("COLUMNS", "").isdigit():
        return max(20, min(int(os.environ["COLUMNS"]), 100))
    if sys.stdout.isatty():
        return max(20, min(shutil.get_terminal_size().columns, 100))
    return 80


def _panel(title: str, lines: list[str], width: int) -> str:
    """A rounded box as rich draws typer's panels, ``lines`` wrapped to fit."""
    import textwrap

    inner = width - 4
    body = [row for line in lines for row in (textwrap.wrap(line, inner) or [""])]
    top = f"╭─ {title} " + "─" * max(0, width - len(title) - 5) + "╮"
    return "\n".join([top, *(f"│ {row:<{inner}} │" for row in body),
                      "╰" + "─" * (width - 2) + "╯"]) + "\n"


def _table_panel(title: str, rows: list[tuple[str, str]], width: int, gap: int) -> str:
    """A panel of two columns: names, and their text wrapped beside them."""
    import textwrap

    inner = width - 4
    name_w = max(len(n) for n, _ in rows)
    text_w = max(10, inner - name_w - gap)
    body = []
    for name, text in rows:
        wrapped = textwrap.wrap(text, text_w) or [""]
        for i, part in enumerate(wrapped):
            body.append(f"{name if i == 0 else '':<{name_w}}{' ' * gap}{part}")
    top = f"╭─ {title} " + "─" * max(0, width - len(title) - 5) + "╮"
    return "\n".join([top, *(f"│ {row:<{inner}} │" for row in body),
                      "╰" + "─" * (width - 2) + "╯"]) + "\n"


def _root_help() -> str:
    width = _width()
    return ("\n".join(["", f" Usage: {PROG} [OPTIONS] COMMAND [ARGS]...", "", f" {SUMMARY}", ""])
            + "\n"
            + _table_panel("Options", [(o, h) for o, h in ROOT_OPTIONS], width, 2)
            + _table_panel("Commands", [(n, s) for n, (_, s) in COMMANDS.items()], width, 2))
