"""The board's everyday commands without typer: ``add``, ``list``/``board``, ``show``,
``cancel`` and ``status``, in their plain forms.

typer and its click take about 70 ms to import and to build a command, a sixth of a
``list`` of 10,000 tasks and a third of ``show``. A command line made only of the options
below is read here and its function in `orchestrator.cli.tasks` is called, the same one
its typer command calls. Anything else — ``--help``, an option not listed (``--watch``),
``--opt=value`` or bundled short options, a value that does not convert, a missing or extra
argument — returns False and typer reads the command line as before, with its errors and
help. ``tests/test_cli_quick.py`` holds each table here to its typer command: the same
option names, kinds and parameters, and the same arguments for every command line of a
corpus.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

FLAG, TEXT, INT, PATH, STATUS = "flag", "text", "int", "path", "status"
"""The kinds of option: a flag takes no value; the others take one, converted."""

COMMON: dict[str, tuple[str, str]] = {"--repo": ("repo", PATH), "-C": ("repo", PATH),
                                      "--json": ("json_", FLAG)}

# command -> (function in orchestrator.cli.tasks, its positional parameters,
#             option -> (parameter, kind), parameters given as a list (repeatable options))
SPECS: dict[str, tuple[str, tuple[str, ...], dict[str, tuple[str, str]], frozenset[str]]] = {
    "add": ("add", ("subject",), {
        **COMMON, "--description": ("description", TEXT), "-d": ("description", TEXT),
        "--blocked-by": ("blocked_by", TEXT), "-b": ("blocked_by", TEXT),
        "--priority": ("priority", INT), "-p": ("priority", INT),
        "--backend": ("backend", TEXT), "--agent": ("agent", TEXT),
        "--no-changes-expected": ("no_changes", FLAG), "--plan-first": ("plan_first", FLAG),
        "--budget-usd": ("budget_usd", TEXT), "--budget-tokens": ("budget_tokens", TEXT),
        "--timeout": ("timeout", TEXT)}, frozenset({"blocked_by"})),
    "list": ("list_tasks", (), {**COMMON, "--status": ("status", STATUS),
                                "-s": ("status", STATUS)}, frozenset({"status"})),
    "show": ("show", ("task_id",), COMMON, frozenset()),
    "cancel": ("cancel", ("task_id",), COMMON, frozenset()),
    "status": ("status", (), {**COMMON, "--json": ("json_out", FLAG)}, frozenset()),
}
SPECS["board"] = SPECS["list"]


def parse(args: list[str]) -> tuple[str, dict[str, Any]] | None:
    """``args`` (the command and its arguments) as the function to call and its keyword
    arguments, or None when typer must read them."""
    spec = SPECS.get(args[0]) if args else None
    if spec is None:
        return None
    function, positional, options, repeatable = spec
    kwargs: dict[str, Any] = {}
    given: list[str] = []
    rest = iter(args[1:])
    for arg in rest:
        if arg == "-":
            return None  # click reads a lone "-" as an argument: typer's rules, not ours
        if not arg.startswith("-"):
            given.append(arg)
            continue
        found = options.get(arg)
        if found is None:
            return None  # --help, --opt=value, -bX, --, or an option typer has to answer
        name, kind = found
        if kind == FLAG:
            kwargs[name] = True
            continue
        raw = next(rest, None)
        if raw is None or raw.startswith("-"):
            return None  # a missing value, or one click might read otherwise
        value = _convert(kind, raw)
        if value is None:
            return None
        if name in repeatable:
            kwargs.setdefault(name, []).append(value)
        elif name in kwargs:
            return None  # given twice: typer's rule (the last wins) is not repeated here
        else:
            kwargs[name] = value
    if len(given) != len(positional):
        return None
    kwargs.update(zip(positional, given, strict=True))
    return function, kwargs


def _convert(kind: str, raw: str) -> Any:
    if kind == TEXT:
        return raw
    if kind == PATH:
        return Path(raw) if raw else None
    if kind == INT:
        try:
            return int(raw)
        except ValueError:
            return None
    from orchestrator.model import Status

    try:
        return Status(raw)
    except ValueError:
        return None


def run(args: list[str]) -> bool:
    """Run the command of ``args`` here and return True, or return False for typer."""
    found = parse(args)
    if found is None:
        return False
    from orchestrator.cli import tasks

    function: Callable[..., None] = getattr(tasks, found[0])
    try:
        function(**found[1])
    except BrokenPipeError:
        # the reader went away (`orchestrator list | head`): as click does, exit 1 quietly
        # (and keep Python from reporting the failed flush of stdout at exit)
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    return True
