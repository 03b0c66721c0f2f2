"""A kept task's diff: its changes against its base (`orchestrator.branches.changes`
says where they are measured from), and what a merged task brought in."""

from __future__ import annotations

from orchestrator.branches.changes import Changes, changes
from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane, Event
from orchestrator.errors import Conflict
from orchestrator.events import Merged
from orchestrator.git import Git
from orchestrator.layout import Layout
from orchestrator.review.common import using_board


def diff_output(repo: Git, ch: Changes, *, stat: bool = False, color: bool = False,
                limit: int | None = None) -> str:
    """``limit``: at most that many bytes, then a `CUT` line (`Git.run`)."""
    args = ["diff", f"--color={'always' if color else 'never'}"]
    if stat:
        args.append("--stat")
    return repo.run(*args, ch.base, ch.tip, limit=limit).stdout


def diff_text(layout: Layout, config: Config, task_id: str, *, stat: bool = False,
              color: bool = False, board: ControlPlane | None = None,
              limit: int | None = None) -> str:
    """``git diff`` of the task's changes against its base (``--stat`` with ``stat``; at
    most ``limit`` bytes, for the faces that show it: the web board, the MCP server)."""
    with using_board(layout, config, board, "cli") as b:
        task = b.get(task_id)
    from orchestrator.worktree.remote import Remote

    remote = Remote.for_config(layout.root, config)
    tip = None
    if remote is not None and task.branch:  # it may have been finished on another machine
        remote.fetch_branches([task.branch])
        if remote.behind(task.branch):  # a stale worktree here holds the branch back
            tip = remote.remote_ref(task.branch)
    return diff_output(Git(layout.root), changes(Git(layout.root), task, tip_ref=tip),
                       stat=stat, color=color, limit=limit)


def merged_text(layout: Layout, config: Config, task_id: str, *, stat: bool = False,
                board: ControlPlane | None = None, limit: int | None = None
                ) -> tuple[str, Event]:
    """What a merged task brought into its target, from its ``merged`` event (the branch is
    gone by then): the diff of the merge commit against its first parent (``merge``,
    ``squash``), else of the branch tip it landed against where it started. Returns the
    diff and the event; `Conflict` when there is no merge to show."""
    with using_board(layout, config, board, "cli") as b:
        task = b.get(task_id)
        found = [(e, m) for e in b.events.read(task=task.id) if isinstance(m := e.decode(), Merged)]
    if not found:
        raise Conflict(f"{task.id} is {task.status}: no merge of it is recorded")
    event, merged = found[-1]
    repo = Git(layout.root)
    commit, tip = merged.commit, merged.tip
    parents = repo.run("rev-list", "--parents", "-n", "1", commit, check=False).stdout.split()
    if len(parents) >= 2 and merged.strategy in ("merge", "squash", "forge"):
        old, new = parents[1], commit
    elif tip and task.base_commit:
        old, new = task.base_commit, tip
    else:
        raise Conflict(f"{task.id}: its merge {commit[:12] or '?'} is not in this repository")
    args = ["diff", "--color=never", *(["--stat"] if stat else []), old, new]
    out = repo.run(*args, check=False, limit=limit)
    if out.returncode != 0:
        raise Conflict(f"{task.id}: its merge {commit[:12]} is not in this repository "
                       f"({out.stderr.strip()})")
    return out.stdout, event
