"""Agent commands: ``approve`` and ``deny`` answer permission requests and plan
approvals; ``demo``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.agent import permission_flow
from orchestrator.board import open_board
from orchestrator.cli.app import JsonOpt, RepoOpt, app, open_repo, print_json
from orchestrator.cli.output import echo


def _answer(ident: str, approved: bool, message: str, repo: RepoOpt, as_json: bool) -> None:
    r = open_repo(repo)
    with open_board(r.layout, r.board, actor="cli") as board:
        req = permission_flow.answer(board, ident, approved=approved, message=message)
    if as_json:
        print_json({"request_id": req["request_id"], "task": req.get("task"),
                    "approved": approved, "message": message})
        return
    verb = "approved" if approved else "denied"
    if req.get("kind") == "plan_request":
        echo(f"{verb} the plan of {req.get('task')} [{req['request_id']}]")
        return
    echo(f"{verb} {req.get('tool')}({req.get('subject') or ''}) for {req.get('task')} "
         f"[{req['request_id']}]")


@app.command()
def approve(
    ident: Annotated[str, typer.Argument(metavar="ID", help="A task id or a request id.")],
    message: Annotated[str, typer.Option("--message", "-m", help="A note for the agent.")] = "",
    repo: RepoOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Allow the tool call (or the plan of a plan-first task) a waiting agent asked about."""
    _answer(ident, True, message, repo, as_json)


@app.command()
def deny(
    ident: Annotated[str, typer.Argument(metavar="ID", help="A task id or a request id.")],
    message: Annotated[str, typer.Option("--message", "-m", help="Why (the agent sees it).")] = "",
    repo: RepoOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Refuse the tool call or plan a waiting agent asked about; it gets the reason."""
    _answer(ident, False, message, repo, as_json)


def command_name() -> str:
    """How to run this orchestrator from another folder: ``orchestrator`` when that is the
    one on PATH, else the full path of the one running (e.g. ``…/.venv/bin/orchestrator``
    when ``scripts/run`` started it)."""
    import shutil
    import sys

    me = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    found = shutil.which("orchestrator")
    if me is None or me.name != "orchestrator" or (found and Path(found).resolve() == me):
        return "orchestrator"
    return str(me)


@app.command()
def demo(
    directory: Annotated[Path | None, typer.Option(
        "--dir", help="Build the sample project here (a new or empty folder); "
                      "default: a temporary folder.")] = None,
    teammates: Annotated[int, typer.Option("-n", "--teammates", min=1, max=8,
                                           help="How many teammates.")] = 2,
    as_json: JsonOpt = False,
) -> None:
    """Build a sample repo with four tasks, run a scripted team on it, show the review table."""
    from orchestrator.agent import demo as d

    layout = d.create_project(directory)
    if not as_json:
        echo(f"sample project with 4 tasks in {layout.root}\n"
                   f"running: orchestrator up --burst -n {teammates} (scripted teammates)")
    code = d.run_team(layout, teammates)
    rows = d.review_rows(layout)
    if as_json:
        print_json(d.as_json(layout, code, rows))
    else:
        echo(f"\n{d.table(rows)}\n\nlook around: cd {layout.root} && "
                   f"{command_name()} list && git diff main...{rows[0].branch}")
    if code != 0 or not d.all_in_review(rows):
        raise typer.Exit(1)
