"""Where a blocked task starts: stacked on the work of its blockers.

A blocker kept for review (not merged yet) gives its branch; several give a merge
of their branches, made with ``git merge-tree --write-tree`` and ``commit-tree``
so no working tree or index is touched. A merged blocker is already in the base.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.controlplane import ControlPlane
from orchestrator.errors import RunError
from orchestrator.git import Git
from orchestrator.model import Status, Task


def kept_blockers(board: ControlPlane | None, repo: Git, task: Task,
                  branch_for: Callable[[Task], str]) -> list[tuple[str, str]]:
    """(branch, tip) of each blocker kept for review, in ``blocked_by`` order."""
    if not task.blocked_by or board is None:
        return []
    kept = []
    for blocker_id in task.blocked_by:
        blocker = board.get(blocker_id)
        if blocker.status == Status.MERGED:
            continue
        if blocker.status != Status.REVIEW:
            raise RunError(f"{task.id}: blocker {blocker_id} is {blocker.status}, "
                           "not review or merged", task=task.id)
        branch = branch_for(blocker)
        tip = repo.commit_of(f"refs/heads/{branch}")
        if tip is None:
            raise RunError(f"{task.id}: branch {branch} of blocker {blocker_id} is missing",
                           task=task.id)
        kept.append((branch, tip))
    return kept


def merge_branches(repo: Git, task_id: str, kept: list[tuple[str, str]]) -> str:
    """A merge commit of the branches; a conflict raises `RunError` naming the files."""
    current = kept[0][1]
    for i, (branch, tip) in enumerate(kept[1:], 1):
        out = repo.run("merge-tree", "--write-tree", "--name-only", "--no-messages",
                       current, tip, check=False)
        if out.returncode == 1:
            files = sorted({f for f in out.stdout.splitlines()[1:] if f})
            names = ", ".join(name for name, _ in kept[: i + 1])
            raise RunError(f"{task_id}: the branches of its blockers ({names}) conflict in: "
                           f"{', '.join(files)}", task=task_id)
        if out.returncode != 0:
            raise RunError(f"{task_id}: git merge-tree failed: {out.stderr.strip()}",
                           task=task_id)
        tree = out.stdout.splitlines()[0]
        current = repo.out("commit-tree", tree, "-p", current, "-p", tip,
                           "-m", f"orchestrator: merge {branch} for {task_id}")
    return current
