"""The command line: a thin layer over the library, parsed by typer alone.

Errors we raise on purpose (`OrchestratorError`) print one line on stderr and
exit 1; usage errors exit 2 (typer/click); anything unexpected prints one line
too, with the full traceback only when ``ORCH_DEBUG=1``.

**Adding a command**: a typer function registered on ``app`` in its module under
``orchestrator/cli/`` (``@app.command("land")``); a new module also goes into
`MODULES`, in the order ``orchestrator --help`` lists its commands. A command
module imports the library inside its commands, so that every command's start
pays only for typer and the command it runs.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import typer

MODULES = ("board", "worktrees", "team", "agent", "review", "mcp", "ui", "settings", "enter",
           "forge")
"""The modules under ``orchestrator.cli`` that register commands on ``app``."""

SHORT_LIVED = frozenset({"add", "list", "board", "show", "cancel", "status", "review"})
"""Commands that read the board and exit: they run without the cycle collector, whose
passes over the objects of a 50,000-task board cost a fifth of ``list`` (reference
counting still frees everything that is not in a cycle)."""

PROG = "orchestrator"


def load_app() -> typer.Typer:
    """The typer application with every command registered."""
    import importlib

    for module in MODULES:
        importlib.import_module(f"orchestrator.cli.{module}")
    from orchestrator.cli.app import app

    _unwrap_help(app)
    return app


def _unwrap_help(group: typer.Typer) -> None:
    """Docstrings wrap at 100 columns; help is wrapped again to the terminal. Join the
    lines of each paragraph so the help does not break in ragged places."""
    import inspect

    for info in group.registered_commands:
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
    from orchestrator.errors import OrchestratorError

    if args[:1] and args[0] in SHORT_LIVED and "--watch" not in args:  # list --watch runs on
        import gc

        gc.disable()  # see SHORT_LIVED
    as_json = "--json" in args
    try:
        app = load_app()
        if as_json:
            _run_for_json(app, args)
        app(args=args, prog_name=PROG)  # click's standalone mode: usage errors exit 2
    except OrchestratorError as exc:
        _error(str(exc), type(exc).__name__, as_json)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        # the reader went away (`orchestrator list | head`): as click does, exit 1 quietly
        # (and keep Python from reporting the failed flush of stdout at exit)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except Exception as exc:
        if os.environ.get("ORCH_DEBUG"):
            raise
        _error(f"{type(exc).__name__}: {exc} (ORCH_DEBUG=1 for the traceback)",
               type(exc).__name__, as_json)


def _run_for_json(app: typer.Typer, args: list[str]) -> NoReturn:
    """With ``--json``, usage errors are JSON on stderr too (exit 2)."""
    import typer

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
