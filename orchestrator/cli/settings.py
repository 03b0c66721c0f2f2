"""Settings and planning commands: ``config list|get|set|unset`` and ``plan``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator.cli.app import JsonOpt, RepoOpt, app, open_repo, print_json
from orchestrator.cli.output import echo
from orchestrator.errors import InvalidInput
from orchestrator.layout import find_root
from orchestrator.settings import Scope

if TYPE_CHECKING:  # the settings models are imported by the commands that use them
    from orchestrator.config import Config
    from orchestrator.settings.registry import Registry

config_app = typer.Typer(help="Show and change settings (orchestrator.toml).",
                         no_args_is_help=True)
app.add_typer(config_app, name="config")

ScopeOpt = Annotated[Scope | None, typer.Option(
    "--scope", help="Write to the project's orchestrator.toml or the user's config file "
    "(default: the project's).")]
UserOpt = Annotated[bool, typer.Option(
    "--user", help="Write to your user config file (~/.config/orchestrator/config.toml) "
    "instead of the project's.")]


def _registry() -> Registry:
    from orchestrator.settings.registry import Registry

    return Registry()


def _config(root: Path) -> Config:
    from orchestrator.config import Config

    return Config.load(root)


def _show(value: Any) -> str:
    """A value as `config set` takes it back (``none``, not JSON's ``null``)."""
    if value is None:
        return "none"
    return value if isinstance(value, str) else json.dumps(value)


@config_app.command("list")
def list_settings(repo: RepoOpt = None, json_: JsonOpt = False) -> None:
    """Every setting: its value now, where it comes from, and what is allowed."""
    root = find_root(repo)
    config, reg = _config(root), _registry()
    rows = [s.to_dict(reg.value(config, s.key), reg.source(root, s.key)) for s in reg]
    if json_:
        print_json(rows)
        return
    for r in rows:
        flags = ", ".join(f for f in ("live" if r["live"] else "restart", r["scope"],
                                      "agents may set" if r["agent_writable"] else "") if f)
        origin = "" if r["source"] == "default" else f"  ({r['source']})"
        echo(f"{r['key']} = {_show(r['value'])}{origin}\n"
                   f"    {r['description']} [{r['type']}; {r['allowed']}; {flags}]")


@config_app.command("get")
def get_setting(
    key: Annotated[str, typer.Argument(help="section.name, e.g. team.teammates")],
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """One setting's value in force (file, environment and defaults applied)."""
    root = find_root(repo)
    reg = _registry()
    setting = reg.get(key)
    value = reg.value(_config(root), key)
    if json_:
        print_json(setting.to_dict(value, reg.source(root, key)))
    else:
        echo(_show(value))


@config_app.command("set")
def set_setting(
    key: Annotated[str, typer.Argument(help="section.name, e.g. team.teammates")],
    value: Annotated[str, typer.Argument(help='The value: 3, true, text, ["a", "b"], none.')],
    scope: ScopeOpt = None,
    user: UserOpt = False,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Change a setting in the project's file (--user: yours); a running daemon applies
    live settings at once."""
    root = find_root(repo)
    reg = _registry()
    result = reg.set(root, key, reg.writable(key).parse(value),
                     scope="user" if user else scope)
    _report(result, json_)


@config_app.command("unset")
def unset_setting(
    key: Annotated[str, typer.Argument(help="section.name")],
    scope: ScopeOpt = None,
    user: UserOpt = False,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Remove a setting from the project's file (--user: yours), back to the default."""
    root = find_root(repo)
    result = _registry().set(root, key, None, scope="user" if user else scope,
                             remove=True)
    _report(result, json_)


def _report(result: Any, json_: bool) -> None:
    if json_:
        print_json(result.to_dict())
        return
    s = result.setting
    default = _show(s.default)
    if result.value is None and result.changed:
        echo(f"removed {s.key} from {result.path} (now the default: {default})")
    elif result.value is None:
        echo(f"{s.key} was not set in {result.path}; nothing changed "
                   f"(it is the default: {default})")
    elif not result.changed:
        echo(f"{s.key} = {_show(result.value)} already in {result.path}; nothing changed")
    else:
        echo(f"set {s.key} = {_show(result.value)} in {result.path}")
    if result.shadowed_by:
        echo(f"note: {result.shadowed_by} is set in the environment and wins over the file")
    elif not s.live:
        echo("note: a running daemon applies this after a restart")


@app.command("plan")
def plan_cmd(
    goal: Annotated[str, typer.Argument(help="What the team should achieve.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan, write nothing.")]
    = False,
    agent: Annotated[str | None, typer.Option(
        "--agent", help="An agent profile for the lead (its prompt, model, tools).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="The lead's model.")] = None,
    script: Annotated[Path | None, typer.Option(
        "--script", help="Replay a scripted lead instead of calling the API (tests, demos).")]
    = None,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """The lead reads the repository and turns GOAL into tasks with dependencies."""
    from orchestrator.agent.plan import make_plan
    from orchestrator.board import open_board
    from orchestrator.profiles import load_profiles

    r = open_repo(repo)
    profile = load_profiles(r.layout.root, r.config).get(agent) if agent else None
    lead = _lead_model(script, model or (profile.model if profile else None)
                       or r.config.agent.model)
    try:
        with open_board(r.layout, r.board, actor="lead") as board:
            if not dry_run:  # intake moves dropped files: a dry run leaves them be
                board.intake()
            plan = make_plan(goal, r.layout, r.config, board, lead, dry_run=dry_run,
                             profile=profile)
    finally:
        lead.close()
    if json_:
        print_json(plan.to_dict())
        return
    echo(f"{'planned' if dry_run else 'added'} {len(plan.tasks)} tasks for: {plan.goal}")
    for t in plan.tasks:  # what the lead's model wrote: control characters written out
        blocked = f"  (blocked by {', '.join(t.blocked_by)})" if t.blocked_by else ""
        who = f"  [{t.agent}]" if t.agent else ""
        echo(f"  {t.id or t.ref:<9} {t.subject}{blocked}{who}")
    if dry_run:
        echo("dry run: nothing was written")


def _lead_model(script: Path | None, model: str) -> Any:
    if script is None:
        from orchestrator.agent.anthropic_model import AnthropicModel

        return AnthropicModel(model)
    from orchestrator.agent.scripted import ScriptedModel

    try:
        steps = json.loads(script.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"cannot read script {script}: {exc}") from exc
    steps = steps.get("steps") if isinstance(steps, dict) else steps
    if not isinstance(steps, list):
        raise InvalidInput(f"{script}: a script is a list of steps or {{\"steps\": [...]}}")
    return ScriptedModel(steps)
