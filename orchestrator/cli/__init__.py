"""The command line: a thin layer over the library.

Errors we raise on purpose (`OrchestratorError`) print one line on stderr and
exit 1; usage errors exit 2 (typer/click); anything unexpected prints one line
too, with the full traceback only when ``ORCH_DEBUG=1``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
from typing import NoReturn

import typer

from orchestrator.errors import OrchestratorError

#: Command modules, imported for their side effect of registering on `app`.
COMMAND_MODULES = ("board", "worktrees", "team", "agent", "review", "mcp", "settings", "enter",
                   "ui")


def _load_commands() -> None:
    for name in COMMAND_MODULES:
        try:
            importlib.import_module(f"orchestrator.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"orchestrator.cli.{name}":
                raise
    from orchestrator.cli.app import app

    _unwrap_help(app)


def _unwrap_help(group: typer.Typer) -> None:
    """Docstrings wrap at 100 columns; help is wrapped again to the terminal. Join the
    lines of each paragraph so the help does not break in ragged places."""
    for info in group.registered_commands:
        text = info.help or inspect.getdoc(info.callback) or ""
        info.help = "\n\n".join(" ".join(p.split()) for p in text.split("\n\n"))
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _unwrap_help(sub.typer_instance)


def main(argv: list[str] | None = None) -> None:
    from orchestrator.mcp.handshake import early

    early(sys.argv[1:] if argv is None else argv)  # `mcp`: answer initialize first
    from orchestrator.cli.app import app

    _load_commands()
    as_json = "--json" in (sys.argv[1:] if argv is None else argv)
    try:
        if as_json:
            _run_for_json(argv)
        app(args=argv, prog_name="orchestrator")  # click's standalone mode: usage errors exit 2
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


def _run_for_json(argv: list[str] | None) -> NoReturn:
    """With ``--json``, usage errors are JSON on stderr too (exit 2)."""
    import typer

    from orchestrator.cli.app import app

    try:
        result = app(args=argv, prog_name="orchestrator", standalone_mode=False)
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
