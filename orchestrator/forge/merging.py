"""Merged there, merged here.

`mark_merged`: a pull request merged on the forge (a person, auto-merge, a merge queue)
marks its task merged, brings the base branch here up to date when that touches no
uncommitted work, and removes the worktree as ``merge`` does.

``orchestrator merge``/``land`` on a board with a forge (`merge_on_forge`, `land_on_forge`):
the pull request is merged through the forge's API, so branch protection and required
checks decide (the forge's answer is the refusal), then `mark_merged`. The base branch
is never pushed by us."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

import msgspec

from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.errors import Conflict
from orchestrator.events import Merged
from orchestrator.forge import ForgeError, PullRequest, open_forge
from orchestrator.git import Git
from orchestrator.layout import Layout
from orchestrator.model import ForgeLink, Status, Task
from orchestrator.review.common import using_board
from orchestrator.worktree.names import check_branch

if TYPE_CHECKING:
    from orchestrator.review.landing import LandReport, Outcome
    from orchestrator.review.merging import MergeResult

FORGE_CHECKS = "the forge's required checks"


def merge_on_forge(layout: Layout, config: Config, task_id: str, strategy: str, *,
                   actor: str, board: ControlPlane | None = None) -> MergeResult:
    """Merge a task's pull request through the forge; the `MergeResult` of the task merged
    here. A refusal (checks not passed, review required, a moved head) is a `Conflict` with
    the forge's reason, and nothing changes."""
    forge = open_forge(config.forge, layout.root)
    assert forge is not None
    method = config.forge.merge_method if strategy == "merge" else strategy
    try:
        with using_board(layout, config, board, actor) as b:
            task = b.get(task_id)
            link = task.forge
            if task.status is not Status.REVIEW:
                raise Conflict(f"{task.id} is {task.status}: only a task in review can be "
                               "merged")
            if link is None or link.pr is None or link.pushed is None:
                raise Conflict(f"{task.id} has no pull request yet: the lead opens one (or "
                               "run `orchestrator forge sync`)")
            pull = forge.get_pull(link.pr)
            if not pull.merged:
                if pull.head_sha != link.pushed:
                    raise Conflict(f"pull request #{pull.number} is at {pull.head_sha[:12]}, "
                                   f"not {link.pushed[:12]} that orchestrator pushed; "
                                   "`orchestrator forge sync` first")
                try:
                    forge.merge_pull(pull.number, sha=link.pushed, method=method)
                except ForgeError as exc:
                    raise Conflict(f"the forge refused to merge #{pull.number}: {exc}") from None
                pull = forge.get_pull(pull.number)
            return mark_merged(layout, config, b, task, pull, actor=actor)
    finally:
        forge.close()


def land_on_forge(layout: Layout, config: Config, ids: Sequence[str] | None, *, strategy: str,
                  actor: str, board: ControlPlane | None,
                  progress: Callable[[Outcome], None] | None,
                  named: Collection[str] = ()) -> LandReport:
    """``land`` on a forge board: each task's pull request merged through the forge in land
    order (blockers first); one the forge refuses stays in review with the reason, and the
    tasks stacked on it are skipped. One that changes control files and that no person
    named (``named``) is skipped (`orchestrator.branches.control`)."""
    from orchestrator.branches.control import describe_control, task_control_changes
    from orchestrator.review.landing import LandReport, Outcome, _selected, land_order

    started = time.monotonic()
    report = LandReport(verify=FORGE_CHECKS)
    with using_board(layout, config, board, actor) as b:
        tasks = land_order(_selected(b, ids))
        failed: set[str] = set()
        for task in tasks:
            blocker = next((x for x in task.blocked_by if x in failed), None)
            control = [] if blocker is not None or task.id in named else \
                task_control_changes(Git(layout.root), task)
            if blocker is not None:
                out = Outcome(task=task.id, result="skipped", reason=f"{blocker} did not land")
                failed.add(task.id)
            elif control:
                out = Outcome(task=task.id, result="skipped",
                              reason=describe_control(control, task.id))
                failed.add(task.id)
            else:
                try:
                    result = merge_on_forge(layout, config, task.id, strategy, actor=actor,
                                            board=b)
                    out = Outcome(task=task.id, result="landed",
                                  commit=result.commit)
                except Conflict as exc:
                    out = Outcome(task=task.id, result="rejected", reason=str(exc))
                    failed.add(task.id)
            report.outcomes.append(out)
            if progress is not None:
                progress(out)
    report.seconds = round(time.monotonic() - started, 3)
    return report


def mark_merged(layout: Layout, config: Config, board: ControlPlane, task: Task,
                pull: PullRequest, *, actor: str = "forge") -> MergeResult:
    """A pull request merged on the forge: the base branch brought up to date here (when it
    can be without touching uncommitted work), the task ``merged`` and its worktree removed
    as ``merge`` does."""
    from orchestrator.review.merging import MergeResult, cleanup

    repo = Git(layout.root)
    remote = config.forge.remote
    check_branch(pull.base, "base branch")
    tracking = f"refs/remotes/{remote}/{pull.base}"
    repo.run("fetch", "--quiet", remote, f"+refs/heads/{pull.base}:{tracking}", check=False)
    new = repo.commit_of(tracking) or pull.merge_commit or ""
    _fast_forward(repo, pull.base, new)
    tip = repo.commit_of(f"refs/heads/{task.branch}") if task.branch else None
    kept = tip is not None and repo.ok("merge-base", "--is-ancestor", tip, new)
    link = msgspec.structs.replace(task.forge or ForgeLink(), state="merged", note=None)
    task = board.set_status(task.id, Status.MERGED, actor=actor, forge=link)
    board.events.emit(Merged(strategy="forge", into=pull.base, commit=pull.merge_commit or new,
                             branch=task.branch, tip=tip, pr=pull.number), task.id, actor=actor)
    result = MergeResult(task=task, strategy="merge" if kept else "squash", into=pull.base,
                         commit=new, branch=task.branch or "", removed=False)
    cleanup(layout, config, board, result)
    return result


def _fast_forward(repo: Git, branch: str, new: str) -> None:
    """Move ``branch`` to ``new`` when that is a fast-forward: in the main working tree when
    it is checked out there (``merge --ff-only`` refuses to overwrite changes), else the ref."""
    old = repo.commit_of(f"refs/heads/{branch}")
    if not new or old == new or (old is not None and not repo.ok("merge-base", "--is-ancestor",
                                                                 old, new)):
        return
    head = repo.run("symbolic-ref", "-q", "--short", "HEAD", check=False).stdout.strip()
    if head == branch:
        repo.run("merge", "--quiet", "--ff-only", new, check=False)
    else:
        repo.run("update-ref", f"refs/heads/{branch}", new, old or "", check=False)
