"""The everyday board commands read without typer (`orchestrator.cli.quick`) mean exactly
what typer reads: the same options, and the same arguments for every command line."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.core
import typer.main
import typer.models
from typer import Exit
from typer._click.core import Command
from typer._click.exceptions import ClickException
from typer._click.types import IntParamType, StringParamType
from typer._types import TyperChoice

from orchestrator.cli import _load_commands, quick, tasks
from orchestrator.cli.app import app
from orchestrator.model import Status

LEFT_TO_TYPER = {"--help", "--watch", "-w", "--frames"}
"""Options of these commands that only typer reads (``list --watch`` runs on)."""


def click_command(name: str) -> Command:
    """The command typer builds for ``name`` (typer's own copy of click)."""
    _load_commands([name])
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    command: Command = group.commands[name]
    return command


@pytest.mark.parametrize("name", sorted(quick.SPECS))
def test_each_table_names_the_options_kinds_and_arguments_of_its_typer_command(
        name: str) -> None:
    function, positional, options, repeatable = quick.SPECS[name]
    command = click_command(name)
    arguments = [p.name for p in command.params if isinstance(p, typer.core.TyperArgument)]
    assert tuple(arguments) == positional
    seen: set[str] = set()
    for param in command.params:
        if not isinstance(param, typer.core.TyperOption):
            continue
        for opt in param.opts + param.secondary_opts:
            seen.add(opt)
            if opt in LEFT_TO_TYPER:
                assert opt not in options
                continue
            assert opt in options, f"{name}: {opt} is not read without typer"
            dest, kind = options[opt]
            assert dest == param.name, opt
            assert (kind == quick.FLAG) == bool(param.is_flag), opt
            assert (dest in repeatable) == param.multiple, opt
            if kind == quick.INT:
                assert isinstance(param.type, IntParamType), opt
            elif kind == quick.PATH:
                assert isinstance(param.type, typer.models.TyperPath), opt
            elif kind == quick.STATUS:
                assert isinstance(param.type, TyperChoice), opt
                assert list(param.type.choices) == [s.value for s in Status]
            elif kind == quick.TEXT:
                assert isinstance(param.type, StringParamType), opt
    assert set(options) <= seen  # nothing read here that typer would not read
    assert callable(getattr(tasks, function))


CORPUS: list[list[str]] = [
    ["list"], ["board"], ["list", "--json"], ["list", "-s", "pending"],
    ["list", "--status", "review", "-s", "failed", "--json"], ["list", "-C", "/tmp/x"],
    ["list", "--repo", "rel/path", "--status", "in_progress"],
    ["list", "--status", "PENDING"], ["list", "--status", "bogus"], ["list", "--status"],
    ["list", "--status=pending"], ["list", "-spending"], ["list", "--watch"],
    ["list", "extra"], ["list", "--help"], ["list", "--", "x"], ["list", "--repo", ""],
    ["show", "7"], ["show", "task_007", "--json"], ["show", "--json", "7", "-C", "r"],
    ["show"], ["show", "1", "2"], ["show", "-"], ["show", "--", "-7"], ["show", "7\n"],
    ["cancel", "3"], ["cancel", "--repo", "r", "3", "--json"], ["cancel", "--json"],
    ["status"], ["status", "--json"], ["status", "-C", "r"], ["status", "x"],
    ["add", "a subject"], ["add", "über — ✓ \x1b[31m", "--json"],
    ["add", "s", "-d", "line one\nline two", "-p", "5", "-b", "1", "--blocked-by", "task_002"],
    ["add", "s", "--priority", " 7 "], ["add", "s", "--priority", "5_0"],
    ["add", "s", "--priority", "-1"], ["add", "s", "-p", "x"], ["add", "s", "-p", "1e3"],
    ["add", "s", "--backend", "command", "--agent", "reviewer", "--plan-first",
     "--no-changes-expected", "--budget-usd", "2", "--budget-tokens", "10k",
     "--timeout", "30m", "-C", "here"],
    ["add", "s", "-p", "1", "-p", "2"], ["add", "s", "--description"], ["add"],
    ["add", "one", "two"], ["add", "-", "--json"], ["add", "s", "--nope"],
    ["add", "s", "-d", "--looks-like-an-option"], ["add", "", "--json"],
    ["add", "s", "--json", "--json"],
]


def record_typer(args: list[str], monkeypatch: pytest.MonkeyPatch
                 ) -> dict[str, Any] | None:
    """What typer calls the command's function with (None when typer refuses the line)."""
    function = quick.SPECS[args[0]][0]
    got: list[dict[str, Any]] = []
    monkeypatch.setattr(tasks, function, lambda **kw: got.append(kw))
    _load_commands([args[0]])
    try:
        app(args=args, prog_name="orchestrator", standalone_mode=False)
    except (ClickException, Exit):
        return None
    return got[0] if got else None


SIGNATURES = {spec[0]: inspect.signature(getattr(tasks, spec[0])) for spec in quick.SPECS.values()}


def bound(function: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    sig = SIGNATURES[function]
    b = sig.bind(**kwargs)
    b.apply_defaults()
    return dict(b.arguments)


@pytest.mark.parametrize("args", CORPUS, ids=lambda a: " ".join(a)[:40])
def test_every_line_read_here_is_read_the_same_by_typer(
        args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = quick.parse(args)
    if parsed is None:
        return  # typer reads it, as before
    by_typer = record_typer(args, monkeypatch)
    function, kwargs = parsed
    assert function == quick.SPECS[args[0]][0]
    assert by_typer is not None, f"typer refuses {args}, read here as {kwargs}"
    # typer passes None for an empty list and falsy defaults; the functions treat them alike
    typer_view = {k: v for k, v in bound(function, by_typer).items() if v not in (None, [])}
    ours = {k: v for k, v in bound(function, kwargs).items() if v not in (None, [])}
    assert ours == typer_view


def test_the_lines_left_to_typer_are_the_ones_it_must_answer() -> None:
    left = [a for a in CORPUS if quick.parse(a) is None]
    for args in (["list", "--help"], ["list", "--watch"], ["show"], ["list", "--status", "bogus"],
                 ["add", "s", "-p", "1", "-p", "2"], ["add", "s", "-d", "--looks-like-an-option"]):
        assert args in left
    assert ["list"] not in left and ["add", "s", "--priority", " 7 "] not in left


def test_the_quick_commands_run_without_typer_and_say_the_same(repo: Path) -> None:
    code = ("import sys; from orchestrator.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    code = e.code\n"
            "print('TYPER' if 'typer' in sys.modules else 'NO-TYPER', code, file=sys.stderr)")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                              text=True, cwd=repo, timeout=60)

    p = run("add", "first", "-p", "3")
    assert p.stdout == "added task_001: first\n" and "NO-TYPER 0" in p.stderr, p.stderr
    p = run("add", "second", "--blocked-by", "1", "--json")
    assert '"blocked_by": ["task_001"]' in p.stdout and "NO-TYPER 0" in p.stderr
    for args in (["list"], ["list", "--json"], ["show", "2"], ["status"], ["cancel", "2"]):
        p = run(*args)
        assert "NO-TYPER 0" in p.stderr, (args, p.stderr)
    assert "cancelled" in run("list", "-s", "cancelled").stdout
    # an error from the board is the same one line, exit 1, without typer
    p = run("show", "99")
    assert p.stderr.startswith("error: no task task_099\n") and "NO-TYPER 1" in p.stderr
    p = run("show", "99", "--json")
    assert p.stderr.startswith('{"error": "no task task_099"') and "NO-TYPER 1" in p.stderr
    # typer answers what is not read here: its usage error and help
    p = run("list", "--status", "bogus")
    assert "Invalid value for '--status'" in p.stderr and "TYPER 2" in p.stderr
    p = run("add", "--help")
    assert "--priority" in p.stdout and "TYPER 0" in p.stderr


def test_a_closed_pipe_ends_a_quick_list_quietly(repo: Path) -> None:
    for i in range(300):
        (repo / ".tasks" / "inbox").mkdir(parents=True, exist_ok=True)
        (repo / ".tasks" / "inbox" / f"t{i}.md").write_text(f"task number {i}\n")
    p = subprocess.run(f"'{sys.executable}' -m orchestrator list | head -c 10 >/dev/null; "
                       f"'{sys.executable}' -m orchestrator list --json | head -c 10",
                       shell=True, capture_output=True, text=True, cwd=repo, timeout=120)
    assert "Traceback" not in p.stderr and "Exception" not in p.stderr, p.stderr
    assert p.stdout == '[{"id":"ta'


def test_control_characters_from_a_subject_never_reach_the_terminal_raw(repo: Path) -> None:
    """A subject (typed, or from a dropped file an agent wrote) with a terminal escape,
    an OSC clipboard sequence, a bell and a C1 control (and a description with a carriage
    return and a cursor move): list (piped and on a terminal), show and events print them
    written out, never raw."""
    from tests.helpers import run_on_terminal

    hostile = "fix \x1b]52;c;cHduZWQ=\x07 \x1b[2J gone \x9b31m \u202eend"

    def orch(*args: str) -> str:
        p = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True,
                           text=True, cwd=repo, timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout + p.stderr

    orch("add", hostile, "-d", "first\rover\x1b[1Aup\nsecond line")
    inbox = repo / ".tasks" / "inbox"
    inbox.mkdir(parents=True, exist_ok=True)
    (inbox / "agent.json").write_text(json.dumps({"title": "dropped \x1b[8mhidden\x1b[0m"}))
    stopped_id = json.loads(orch("add", "stopped", "--json"))["id"]  # edited by hand:
    stopped = repo / ".tasks" / f"{stopped_id}.json"  # a hostile reason to wait
    stopped.write_text(json.dumps({**json.loads(stopped.read_text()), "status": "failed",
                                   "waiting_for": "budget \x1b]0;t\x07"}))
    written = "fix \\x1b]52;c;cHduZWQ=\\x07 \\x1b[2J gone \\x9b31m \\u202eend"
    outputs = {"list": orch("list"), "show": orch("show", "1"), "events": orch("events"),
               "terminal": run_on_terminal(repo, ["list", "--status", "pending"],
                                           env={"PAGER": "cat"}),
               "failed": run_on_terminal(repo, ["list", "--status", "failed"],
                                         env={"PAGER": "cat"})}
    for name, out in outputs.items():
        assert "\x07" not in out and "\x9b" not in out and "\r" not in out.replace("\r\n", ""), name
        assert "\x1b]" not in out and "\x1b[2J" not in out and "\x1b[8m" not in out, name
        assert "\u202e" not in out, name  # a bidi override: shown, never obeyed
    for name in ("list", "show", "events", "terminal"):
        assert written in outputs[name], (name, outputs[name])
    assert "dropped \\x1b[8mhidden\\x1b[0m" in outputs["list"]
    assert "budget \\x1b]0;t\\x07" in outputs["failed"]  # the waiting reason
    assert "first\\x0dover\\x1b[1Aup\nsecond line" in outputs["show"]
    assert json.loads(orch("show", "1", "--json"))["subject"] == hostile  # the data is kept
