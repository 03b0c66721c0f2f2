"""Worktree commands: ``worktrees`` (what is on disk per task) and ``gc``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.board import open_board
from orchestrator.cli.app import JsonOpt, RepoOpt, app, open_repo, print_json
from orchestrator.cli.output import echo
from orchestrator.model import Task

if TYPE_CHECKING:
    from orchestrator.worktree import Workspaces, WorkspaceStatus


@contextmanager
def _manager(repo: Path | None) -> Iterator[tuple[Workspaces, list[Task]]]:
    from orchestrator.worktree import open_isolation

    r = open_repo(repo)
    with open_board(r.layout, r.board) as board:
        from orchestrator.sandbox import task_sandbox

        box = task_sandbox(r.config, network=r.config.sandbox.network,  # re-created: setup
                           root=r.layout.root)
        yield open_isolation(r.layout, r.config.worktree, board, actor="cli",
                             sandbox=box), board.list()


@app.command("worktrees")
def worktrees(repo: RepoOpt = None, json_: JsonOpt = False) -> None:
    """List the tasks' worktrees: branch, path, status, dirty or clean, commits ahead, disk use."""
    with _manager(repo) as (manager, tasks):
        rows = manager.overview(tasks)
    root = manager.layout.root
    if json_:
        print_json(rows)
        return
    if not rows:
        echo("no worktrees")
        return
    header = ("TASK", "STATUS", "BRANCH", "STATE", "AHEAD", "DISK", "PATH")
    lines = [header] + [
        (row.task or "-", row.status, row.branch or "-", _state(row),
         "-" if row.ahead is None else str(row.ahead), human_bytes(row.disk_bytes),
         _short(Path(row.path), root))
        for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    echo(f"total: {human_bytes(sum(row.disk_bytes for row in rows))} in "
               f"{sum(1 for row in rows if row.exists)} worktree(s) (shared folders linked "
               "from the cache not counted)")
    for row in rows:
        if row.reason:
            echo(f"! {_short(Path(row.path), root)}: orphan ({row.reason}); "
                       "left untouched")


@app.command("gc")
def gc(
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", "-n", help="Only say what would be removed.")] = False,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Remove the worktrees and branches of merged, discarded and cancelled tasks, when no
    work would be lost; say what was skipped and why."""
    with _manager(repo) as (manager, tasks):
        report = manager.gc(tasks, dry_run=dry_run)
    root = manager.layout.root
    if json_:
        print_json(report.to_dict())
        return
    verb = "would remove" if dry_run else "removed"
    for row in report.removed:
        branch = f", branch {row.branch}" if row.branch else ""
        echo(f"{verb} {row.task} ({row.status}): {_short(Path(row.path), root)}"
                   f"{branch} ({human_bytes(row.freed_bytes)})")
        if row.kept_ignored:
            echo(f"  its gitignored files are kept in {row.kept_ignored}")
    for cached in report.cache:
        echo(f"{verb} unused cache entry {_short(Path(cached.entry), root)} "
                   f"({human_bytes(cached.freed_bytes)})")
    for row in report.skipped:
        echo(f"skipped {row.task} ({row.status}): {row.reason}")
    if not report.removed and not report.skipped and not report.cache:
        echo("nothing to clean up")
    elif report.removed or report.cache:
        echo(f"{'would free' if dry_run else 'freed'} {human_bytes(report.freed_bytes)}")


def _state(row: WorkspaceStatus) -> str:
    if not row.exists:
        return "no folder" if row.branch_exists else "missing"
    if row.dirty is None:
        return "unknown"
    return f"dirty ({row.changes})" if row.dirty else "clean"


def _short(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"
