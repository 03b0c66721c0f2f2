"""The command line: a thin layer over the library.

Errors we raise on purpose (`OrchestratorError`) print one line on stderr and
exit 1; usage errors exit 2 (typer/click); anything unexpected prints one line
too, with the full traceback only when ``ORCH_DEBUG=1``.
"""

from __future__ import annotations

import importlib
import os
import sys

from orchestrator.cli.app import app
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


def main(argv: list[str] | None = None) -> None:
    _load_commands()
    try:
        app(args=argv, prog_name="orchestrator")  # click's standalone mode: usage errors exit 2
    except OrchestratorError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("ORCH_DEBUG"):
            raise
        sys.stderr.write(f"error: {type(exc).__name__}: {exc} (ORCH_DEBUG=1 for the traceback)\n")
        sys.exit(1)
