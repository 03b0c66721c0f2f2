"""Review commands: review, diff, merge, discard, retry (over `orchestrator.review`)."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from typing import Annotated, Any

import typer

from orchestrator.cli.app import JsonOpt, RepoOpt, app, open_repo, page, print_json
from orchestrator.cli.output import echo, plain
from orchestrator.errors import InvalidInput
from orchestrator.model import Status

TaskArg = Annotated[str, typer.Argument(metavar="ID", help="task_007, or just 7.")]


@app.command("review")
def review(repo: RepoOpt = None, json_: JsonOpt = False) -> None:
    """Tasks awaiting review: branch, commits, diffstat, checks, cost, age, overlaps."""
    from orchestrator.review import review_rows

    r = open_repo(repo)
    rows = review_rows(r.layout, r.config)
    if json_:
        print_json(rows)
        return
    if not rows:
        echo("nothing to review")
        return
    from orchestrator.cli.output import PIPED_WIDTH, page_lines
    from orchestrator.cli.table import Piped, Terminal, draw_columns
    from orchestrator.forge import pull_request_cell

    columns = _COLUMNS + ([("pull request", lambda row: pull_request_cell(row["pull_request"]))]
                          if any(row["pull_request"] for row in rows) else [])
    piped = not sys.stdout.isatty()  # piped: one line per row, never wrapped, no styles
    console = Piped(PIPED_WIDTH) if piped else Terminal()
    lines = [line.rstrip() if piped else line for line in draw_columns(
        console, [header for header, _ in columns],
        [[cell(row) for row in rows] for _, cell in columns], [False] * len(columns))]
    told: set[frozenset[str]] = set()
    notes = [note for row in rows for note in _notes(row, told)]
    page_lines(console, lines + [plain(f"! {note}") for note in notes])


@app.command("diff")
def diff(task_id: TaskArg,
         stat: Annotated[bool, typer.Option("--stat", help="Only the per-file summary.")] = False,
         repo: RepoOpt = None, json_: JsonOpt = False) -> None:
    """The task's changes against its base: paged and coloured on a terminal, plain when piped."""
    from orchestrator.review import diff_text
    from orchestrator.review.merging import stacked_note

    r = open_repo(repo)
    if json_:
        from orchestrator.model import normalize_task_id

        print_json({"task": normalize_task_id(task_id), "stat": stat,
                    "diff": diff_text(r.layout, r.config, task_id, stat=stat, color=False)})
        return
    tty = sys.stdout.isatty()
    text = diff_text(r.layout, r.config, task_id, stat=stat, color=tty)
    note = stacked_note(r.layout, r.config, task_id)
    if note:  # on stderr: the diff on stdout stays a patch
        echo(f"note: {note}", err=True)
    if tty:
        page(text)
    else:
        typer.echo(text, nl=False)  # noqa: TID251 - a patch, as git prints it


@app.command("merge")
def merge(
    task_id: TaskArg,
    squash: Annotated[bool, typer.Option("--squash", help="One commit on the target.")] = False,
    rebase: Annotated[bool, typer.Option(
        "--rebase", help="Rebase the branch onto the target, then fast-forward.")] = False,
    into: Annotated[str | None, typer.Option(
        "--into", metavar="BRANCH",
        help="Target branch (default: the one checked out in the main working tree).")] = None,
    with_blockers: Annotated[bool, typer.Option(
        "--with-blockers",
        help="A task stacked on unmerged blockers: merge them first, in order.")] = False,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Merge a reviewed task (checked with git merge-tree first; refused on conflicts, and
    when it is stacked on blockers that are not merged, unless --with-blockers)."""
    if squash and rebase:
        raise InvalidInput("--squash and --rebase exclude each other")
    from orchestrator.review import merge_task

    r = open_repo(repo)
    strategy = "squash" if squash else "rebase" if rebase else "merge"
    result = merge_task(r.layout, r.config, task_id, strategy, into, actor="cli",
                        with_blockers=with_blockers)
    if json_:
        print_json(result)
        return
    if result.blockers:
        echo(f"merged its blockers first: {', '.join(result.blockers)}")
    if result.added:
        echo(f"merged {result.task.id} ({result.branch}) into {result.into} by "
                   f"{strategy}: {result.commit[:12]}")
    else:
        echo(f"{result.task.id} had nothing to merge: {result.branch} adds no commit to "
                   f"{result.into} ({result.into} unchanged at {result.commit[:12]}); "
                   "marked merged")
    if result.snapshot:
        echo(f"the original commits are kept under {result.snapshot}")
    if result.note:
        echo(result.note)


@app.command("land")
def land(
    task_ids: Annotated[list[str] | None, typer.Argument(
        metavar="[IDS]...", help="Tasks to land (task_007 or 7), in any order.")] = None,
    all_reviewed: Annotated[bool, typer.Option(
        "--all-reviewed", help="Every task in review.")] = False,
    into: Annotated[str | None, typer.Option(
        "--into", metavar="BRANCH",
        help="Target branch (default: the one checked out in the main working tree).")] = None,
    verify: Annotated[str | None, typer.Option(
        "--verify", metavar="CMD",
        help="Verify command run on each merge result (default: team.verify).")] = None,
    no_retry: Annotated[bool, typer.Option(
        "--no-retry", help="A rejected task waits in review instead of going back to its "
        "agent.")] = False,
    batch: Annotated[int, typer.Option(
        "--batch", metavar="N", help="Verify up to N tasks merged together; bisect when "
        "they fail.")] = 1,
    squash: Annotated[bool, typer.Option("--squash", help="One commit per task.")] = False,
    rebase: Annotated[bool, typer.Option(
        "--rebase", help="Rebase each branch onto the target, then fast-forward.")] = False,
    unattended: Annotated[bool, typer.Option(
        "--unattended", hidden=True, help="Started by the lead (up --land), not a person: "
        "the named tasks do not count as named for control-file changes.")] = False,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Merge reviewed tasks one by one, each verified on its merge result before the target
    moves (blockers first, then priority, then id). A task whose branch changes control
    files (orchestrator.toml, .claude/, .mcp.json, .gitattributes, hooks, CI…) lands only
    when named here, never with --all-reviewed or by up --land."""
    from orchestrator.review.landing import Outcome, land_tasks

    if squash and rebase:
        raise InvalidInput("--squash and --rebase exclude each other")
    if bool(task_ids) == all_reviewed:
        raise InvalidInput("name the tasks to land, or pass --all-reviewed (not both)")
    r = open_repo(repo)
    stop = threading.Event()  # SIGTERM (`orchestrator down`, a supervisor): stop between steps
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def show(o: Outcome) -> None:
        if json_:
            return
        what = {"landed": f"landed  {o.task} at {(o.commit or '')[:12]}",
                "rejected": f"rejected {o.task}: {o.reason}" + (
                    " (back to its agent)" if o.retried else " (waits in review)"),
                "skipped": f"skipped {o.task}: {o.reason}"}[o.result]
        echo(what)

    report = land_tasks(r.layout, r.config, task_ids or None, into=into, verify=verify,
                        retry=not no_retry, batch=batch, actor="cli", progress=show, stop=stop,
                        strategy="squash" if squash else "rebase" if rebase else "merge",
                        named=() if unattended else task_ids or ())
    if json_:
        print_json(report.model_dump() | {"landed": report.landed,
                                          "rejected": report.rejected})
        raise typer.Exit(1 if report.rejected else 0)
    if report.stopped:
        echo("stopped: the tasks not named above are still in review")
    elif not report.outcomes:
        echo("nothing to land")
        return
    echo(f"{len(report.landed)} landed, {len(report.rejected)} rejected, "
               f"{len(report.outcomes) - len(report.landed) - len(report.rejected)} skipped "
               f"in {report.seconds:.1f}s ({report.verifications} verify runs)")
    raise typer.Exit(1 if report.rejected else 0)  # a script sees that something went back


@app.command("discard")
def discard(
    task_id: TaskArg,
    force: Annotated[bool, typer.Option(
        "--force", help="Discard unmerged work too (saved under a snapshot ref first).")] = False,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Discard a task's work: remove its worktree and branch (fail-closed)."""
    from orchestrator.review import discard_task

    r = open_repo(repo)
    result = discard_task(r.layout, r.config, task_id, force, actor="cli")
    if json_:
        print_json(result)
        return
    if result.task.status is Status.CANCELLED:
        echo(f"removed the worktree and branch of cancelled {result.task.id}: "
             f"{result.task.subject}")
    else:
        echo(f"discarded {result.task.id}: {result.task.subject}")
    if result.snapshot:
        echo(f"its work is kept under {result.snapshot}")
    if result.kept_ignored:
        echo(f"its gitignored files are kept in {result.kept_ignored}")


@app.command("retry")
def retry(
    task_id: TaskArg,
    message: Annotated[str | None, typer.Option(
        "--message", "-m", metavar="FEEDBACK", help="Feedback the next attempt sees.")] = None,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Send a task back to pending in the same worktree and branch, with feedback."""
    from orchestrator.review import retry_task

    r = open_repo(repo)
    task = retry_task(r.layout, r.config, task_id, message, actor="cli")
    if json_:
        print_json(task)
    else:
        echo(f"{task.id} is pending again" + (" with your feedback" if message else ""))


@app.command("resume")
def resume(
    task_id: TaskArg,
    budget_usd: Annotated[str | None, typer.Option(
        "--budget-usd", metavar="USD", help="The task's new dollar budget (all its runs).")
    ] = None,
    budget_tokens: Annotated[str | None, typer.Option(
        "--budget-tokens", metavar="N", help="Its new token budget.")] = None,
    timeout: Annotated[str | None, typer.Option(
        "--timeout", metavar="DURATION", help="Its new wall-clock budget (30m, 1h).")] = None,
    to_review: Annotated[bool, typer.Option(
        "--review", help="Send it to review as it is instead of running it again.")] = False,
    message: Annotated[str | None, typer.Option(
        "--message", "-m", metavar="FEEDBACK", help="Feedback the next run sees.")] = None,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Continue a task that waits after a budget or no-progress stop (same worktree and
    conversation), or send it to review as it is."""
    from orchestrator.review.resuming import resume_task

    r = open_repo(repo)
    task = resume_task(r.layout, r.config, task_id, usd=budget_usd, tokens=budget_tokens,
                       timeout=timeout, review=to_review, feedback=message, actor="cli")
    if json_:
        print_json(task)
    else:
        echo(f"{task.id} is {task.status} again")


def _changes(stat: dict[str, Any] | None) -> str:
    if not stat:
        return "?"
    n = len(stat["files"])
    return f"+{stat['added']} -{stat['removed']} in {n} file{'s' if n != 1 else ''}"


def _checks(checks: dict[str, Any] | None) -> str:
    if not checks:
        return "-"
    return "[green]passed[/]" if checks["passed"] else f"[red]{checks['result']}[/]"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("id", lambda row: row["id"]),
    ("subject", lambda row: plain(row["subject"])),
    ("branch", lambda row: row["branch"] or ""),
    ("commits", lambda row: "" if row["commits"] is None else str(row["commits"])),
    ("changes", lambda row: _changes(row["diffstat"])),
    ("checks", lambda row: _checks(row["checks"])),
    ("spent", lambda row: row["spent"]),
    ("age", lambda row: _age(row["age_seconds"])),
]
"""The review table: each column's header and how a row of `review_rows` fills it."""
_LANDED = {"land_rejected": "rejected", "land_skipped": "skipped"}


def _notes(row: dict[str, Any], told: set[frozenset[str]]) -> list[str]:
    """What a reviewer should know of a row beyond its cells: overlaps (each pair once,
    ``told`` holds those said), a conflict, an error, unmerged blockers, warnings, and
    what land said of it."""
    tid, notes = row["id"], []
    for o in row["overlaps"]:
        if (pair := frozenset((tid, o["task"]))) not in told:
            told.add(pair)
            notes.append(f"{tid} and {o['task']} ({o['status']}) both change: "
                         f"{', '.join(o['files'])}")
    if (merge := row["merge"]) and merge["conflicts"]:
        notes.append(f"{tid} would conflict with {merge['into']} in: "
                     f"{', '.join(merge['conflicts'])}")
    if row.get("error"):
        notes.append(row["error"])
    if row.get("stacked_on"):
        notes.append(f"{tid} is stacked on " + ", ".join(
            f"{s['task']} ({s['status']})" for s in row["stacked_on"])
            + f": merging it brings their changes too (merge {tid} --with-blockers)")
    notes += [f"{tid}: {warning}" for warning in row.get("warnings", [])]
    if (land := row.get("land")) and land["event"] in _LANDED:
        notes.append(f"{tid} was {_LANDED[land['event']]} by land: {land.get('reason')}")
    return notes
