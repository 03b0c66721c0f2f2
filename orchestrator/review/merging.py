"""Merging a kept task: checked first, landed all at once, then the worktree cleaned up.

1. Refuse early: the task is not in ``review``; its worktree has uncommitted work (it
   would not be merged); the target is checked out in the main working tree and that
   tree has uncommitted changes to tracked files; the target is checked out in some
   other worktree.
2. ``git merge-tree --write-tree`` of the branch into the target: conflicts refuse,
   naming the files. Nothing has been touched at this point.
3. Build the result without touching any working tree: ``merge`` a two-parent commit
   (what ``git merge --no-ff`` makes), ``squash`` a one-parent commit of the merged tree,
   ``rebase`` the branch rebased onto the target in the task's worktree (``git rebase``,
   aborted on a conflict) whose tip is then a fast-forward.
4. Land it in one step: ``git merge --ff-only`` in the main working tree when the target
   is checked out there (updates files and index, refuses rather than overwrite), else
   ``git update-ref`` with the old value, so a target that moved meanwhile refuses.
5. The task becomes ``merged`` (dependants waiting on it follow the board's readiness
   rule), a ``merged`` event is written, the worktree and branch are removed: safe after
   ``merge``/``rebase`` (the commits are in the target); after ``squash`` the original
   commits are kept under ``refs/orchestrator/snapshots/<task>``.

Merges hold one lock per repository, so two merges into one branch never race.

A task stacked on blockers that are not merged holds their commits too: merging it alone
would bring their unreviewed work in without a word. It is refused, naming them, unless
``with_blockers`` (``merge --with-blockers``): then each blocker in review is merged
first, in dependency order, and the result says which.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec

from orchestrator.branches.changes import Changes, changes, current_branch, merge_conflicts
from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.errors import (
    Conflict,
    GitError,
    InvalidInput,
    NotFound,
    RunError,
    UnsafeRemoval,
)
from orchestrator.events import Merged
from orchestrator.flock import flocked
from orchestrator.git import Git, list_worktrees
from orchestrator.layout import Layout
from orchestrator.model import Status, Task
from orchestrator.record import Record
from orchestrator.review.common import using_board
from orchestrator.waits import PushRejected
from orchestrator.worktree.names import check_branch
from orchestrator.worktree.remote import Remote
from orchestrator.worktree.safety import MAX_NAMED, dirty_paths

Strategy = Literal["merge", "squash", "rebase"]
STRATEGIES: tuple[str, ...] = ("merge", "squash", "rebase")


class MergeResult(Record):
    task: Task
    strategy: str
    into: str
    commit: str
    """The target's new tip."""
    branch: str
    removed: bool
    """Whether the worktree and branch were removed (see ``note`` when not)."""
    snapshot: str | None = None
    note: str | None = None
    added: bool = True
    """False when the branch brought nothing new (its commits were already in the target):
    the target did not move and ``commit`` is its unchanged tip."""
    blockers: list[str] = msgspec.field(default_factory=list)
    """The unmerged blockers merged before it (``with_blockers``), in that order."""


@dataclass
class Prepared:
    """A task checked for merging: its changes, the target and where the target is now."""

    task: Task
    ch: Changes
    target: str
    target_tip: str
    main: str | None
    """The branch checked out in the main working tree."""
    worktree: Path | None


def merge_task(layout: Layout, config: Config, task_id: str, strategy: str = "merge",
               into: str | None = None, *, actor: str = "cli",
               board: ControlPlane | None = None, with_blockers: bool = False) -> MergeResult:
    """Merge a task in ``review`` into ``into`` (default: the branch checked out in the main
    working tree, else the task's base). Refusals raise `Conflict` and change nothing.
    A task whose blockers are not merged is refused unless ``with_blockers`` (see the
    module's text). With a forge (``[forge]``), the pull request is merged there instead."""
    check_strategy(strategy)
    if config.forge.kind != "none":
        from orchestrator.forge.merging import merge_on_forge

        return merge_on_forge(layout, config, task_id, strategy, actor=actor, board=board)
    with using_board(layout, config, board, actor) as b, merge_lock(layout):
        task = b.get(task_id)
        behind = unmerged_blockers(b, task)
        if behind and not with_blockers:
            raise Conflict(
                f"{task.id} is stacked on {_listed(behind)}, not merged: merging it would bring "
                f"their changes in too; nothing was merged (orchestrator merge {task.id} "
                "--with-blockers merges them first)")
        for t in behind:
            if t.status is not Status.REVIEW:
                raise Conflict(f"{task.id} is stacked on {t.id}, which is {t.status}: only "
                               "blockers in review can be merged with it; nothing was merged")
        for t in behind:
            _merge_one(layout, config, b, t.id, strategy, into, actor)
        result = _merge_one(layout, config, b, task.id, strategy, into, actor)
        result.blockers = [t.id for t in behind]
        return result


def unmerged_blockers(board: ControlPlane, task: Task) -> list[Task]:
    """The task's blockers, and theirs, that are not merged: blockers before dependants."""
    out: dict[str, Task] = {}

    def walk(t: Task, path: frozenset[str]) -> None:
        for b in t.blocked_by:
            if b in out or b in path:
                continue
            try:
                blocker = board.get(b)
            except NotFound:
                continue
            if blocker.status is not Status.MERGED:
                walk(blocker, path | {b})
                out.setdefault(b, blocker)

    walk(task, frozenset({task.id}))
    return list(out.values())


def stacked_note(layout: Layout, config: Config, task_id: str, *,
                 board: ControlPlane | None = None) -> str | None:
    """What merging the task would bring along besides its own changes (its unmerged
    blockers' work), as one line for ``diff`` and the Review page; None when nothing."""
    with using_board(layout, config, board, "cli") as b:
        task = b.get(task_id)
        behind = unmerged_blockers(b, task)
    if not behind:
        return None
    return (f"{task.id} is stacked on {_listed(behind)}: merging it brings their changes too "
            f"(this diff shows only its own; orchestrator merge {task.id} --with-blockers)")


def _listed(tasks: list[Task]) -> str:
    return ", ".join(f"{t.id} ({t.status})" for t in tasks)


def _merge_one(layout: Layout, config: Config, b: ControlPlane, task_id: str, strategy: str,
               into: str | None, actor: str) -> MergeResult:
    repo = Git(layout.root)
    prep = prepare(layout, repo, b.get(task_id), into, config=config, board=b)
    commit = build(repo, prep, strategy, prep.target_tip)
    land_commit(repo, prep, prep.target_tip, commit, f"orchestrator: {strategy} {task_id}")
    remote = Remote.for_config(layout.root, config)
    if remote is not None and commit != prep.target_tip:
        try:
            remote.push_base(prep.target)
        except Conflict as exc:  # still in review: it waits for the remote to take it
            unland(repo, prep.target, commit, prep.target_tip, prep.main)
            b.edit(task_id, actor=actor, error=str(exc),
                   wait=PushRejected(reason=str(exc)[:2000], remote=remote.name))
            raise
    return finish(layout, config, b, prep, strategy, commit, actor=actor)


def check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise InvalidInput(f"unknown merge strategy {strategy!r} (choose from: "
                           f"{', '.join(STRATEGIES)})")


def merge_lock(layout: Layout) -> contextlib.AbstractContextManager[None]:
    """One merge into the repository at a time (``merge``, ``land``)."""
    layout.locks.mkdir(parents=True, exist_ok=True)
    return flocked(layout.locks / "merge.lock", None)


def prepare(layout: Layout, repo: Git, task: Task, into: str | None, *,
            main: str | None = None, main_checked: bool = False,
            config: Config | None = None, board: ControlPlane | None = None) -> Prepared:
    """Step 1: refuse early (see the module docstring); nothing is touched. A queue of
    merges (``land``) passes the main working tree's branch, and ``main_checked`` once it
    has checked that tree (``merge --ff-only`` refuses to overwrite later changes anyway).
    With ``config`` and ``board``: the branch must be the one the orchestrator made for the
    task, and a team across machines fetches it first."""
    if task.status is not Status.REVIEW:
        raise Conflict(f"{task.id} is {task.status}: only a task in review can be merged")
    remote = Remote.for_config(layout.root, config) if config is not None else None
    if remote is not None and task.branch:
        remote.fetch_branches([task.branch])  # it may have been finished on another machine
        if remote.behind(task.branch):
            raise Conflict(f"{task.branch} here is older than on {remote.name} (the task was "
                           f"finished on another machine) and a worktree here holds it: "
                           f"remove .worktrees/{task.id} (orchestrator worktrees) or merge on "
                           "another machine; nothing was merged")
    if config is not None and board is not None:
        _owned_branch(layout, config, board, task)
    if not main_checked:
        main = current_branch(repo)
    ch = changes(repo, task, main)
    target = _target(repo, task, into, main)
    if remote is not None:
        remote.check_base_current(target)
    worktree = _clean_worktree(layout, task)
    if target == main and not main_checked:
        _clean_main_tree(repo)
    target_tip = repo.commit_of(f"refs/heads/{target}")
    assert target_tip is not None  # checked by _target
    return Prepared(task, ch, target, target_tip, main, worktree)


def build(repo: Git, prep: Prepared, strategy: str, onto: str) -> str:
    """Steps 2 and 3: the commit the target becomes when the task is merged onto ``onto``
    (the target's tip, or a commit built on it by an earlier merge of a queue).
    Conflicts raise `Conflict` naming the files; no working tree is touched."""
    task, ch = prep.task, prep.ch
    tree, conflicts = merge_conflicts(repo, onto, ch.tip)
    if conflicts:
        raise Conflict(f"{task.id}: merging {ch.branch} into {prep.target} would conflict in: "
                       f"{', '.join(conflicts)}; nothing was merged (retry the task with "
                       f"feedback: orchestrator retry {task.id} -m '…')")
    assert tree is not None
    if repo.ok("merge-base", "--is-ancestor", ch.tip, onto):
        return onto  # already in the target: nothing to add
    if strategy == "rebase":
        return rebase_onto(repo, task, ch, onto, prep.worktree)
    return _commit(repo, task, ch, tree, onto, prep.target, strategy)


def land_commit(repo: Git, prep: Prepared, old: str, new: str, msg: str) -> None:
    """Step 4: move the target from ``old`` to ``new`` in one step, or refuse."""
    _land(repo, prep.target, old, new, prep.main, msg)


def finish(layout: Layout, config: Config, board: ControlPlane, prep: Prepared, strategy: str,
           commit: str, *, actor: str, remove: bool = True) -> MergeResult:
    """Step 5: the task is merged, the event written, the worktree and branch removed
    (``remove=False``: the caller calls `cleanup` later)."""
    remote = Remote.for_config(layout.root, config)
    if remote is not None:
        remote.drop_wip(prep.task.id)  # merged: its snapshot is of no more use
    task = board.set_status(prep.task.id, Status.MERGED, actor=actor)
    board.events.emit(Merged(strategy=strategy, into=prep.target, commit=commit,
                             branch=prep.ch.branch, tip=prep.ch.tip), task.id, actor=actor)
    result = MergeResult(task=task, strategy=strategy, into=prep.target, commit=commit,
                         branch=prep.ch.branch, removed=False, added=commit != prep.target_tip)
    if remove:
        cleanup(layout, config, board, result)
    return result


def _owned_branch(layout: Layout, config: Config, board: ControlPlane, task: Task) -> None:
    """Refuse a task whose file names a branch the orchestrator did not make for it: merging
    it would land, then delete, someone else's branch."""
    from orchestrator.worktree import open_isolation

    manager = open_isolation(layout, config.worktree, board, actor="review")
    try:
        manager.owned_branch(task)
    except UnsafeRemoval as exc:
        raise Conflict(f"{exc}; nothing was merged") from exc


def _target(repo: Git, task: Task, into: str | None, main: str | None) -> str:
    if into is not None:
        check_branch(into, "--into branch")
        target = into
    elif main is not None:
        target = main
    elif task.base and repo.branch_exists(task.base):
        target = task.base
    else:
        raise InvalidInput("the main working tree is on a detached HEAD: name the branch to "
                           "merge into with --into BRANCH")
    if not repo.branch_exists(target):
        raise NotFound(f"no branch {target} to merge into")
    if target == task.branch:
        raise InvalidInput(f"{task.id}: cannot merge {target} into itself")
    if target != main:
        for entry in list_worktrees(repo):
            if entry.branch == target:
                raise Conflict(f"{target} is checked out in {entry.path}; merge there, or check "
                               "it out in the main working tree")
    return target


def _clean_worktree(layout: Layout, task: Task) -> Path | None:
    """The task's worktree when it is there; refuses when it holds uncommitted work."""
    path = layout.worktree(task.id)
    if not (path / ".git").exists():
        return None
    try:
        dirty = dirty_paths(path)
    except GitError:
        return None
    if dirty:
        raise Conflict(f"{task.id}: its worktree {path} has uncommitted changes that would "
                       f"not be merged: {_named(dirty)} (commit them there, or retry the task)")
    return path


def _clean_main_tree(repo: Git) -> None:
    out = repo.run("status", "--porcelain=v1", "-z", "--untracked-files=no").stdout
    files = [rec[3:] for rec in out.split("\0") if len(rec) > 3]
    if files:
        raise Conflict(f"the main working tree {repo.cwd} has uncommitted changes "
                       f"({_named(files)}); commit or stash them before merging")


def _commit(repo: Git, task: Task, ch: Changes, tree: str, target_tip: str, target: str,
            strategy: str) -> str:
    if strategy == "squash":
        n = int(repo.out("rev-list", "--count", f"{target_tip}..{ch.tip}"))
        msg = (f"{task.subject}\n\nSquashed {n} commit(s) of {ch.branch} into {target}.\n"
               f"Task: {task.id}\n")
        return repo.out("commit-tree", tree, "-p", target_tip, "-m", msg)
    msg = f"Merge {ch.branch} into {target}\n\n{task.id}: {task.subject}\nTask: {task.id}\n"
    return repo.out("commit-tree", tree, "-p", target_tip, "-p", ch.tip, "-m", msg)


def rebase_onto(repo: Git, task: Task, ch: Changes, target_tip: str, worktree: Path | None,
                *, upstream: str | None = None) -> str:
    """Rebase the branch onto ``target_tip`` (in the task's worktree when it is on the branch,
    else in a temporary one); its new tip. A conflict aborts the rebase and refuses.
    ``upstream``: only the commits after it are moved (``git rebase --onto``)."""
    on_branch = worktree is not None and current_branch(Git(worktree)) == ch.branch
    with contextlib.ExitStack() as stack:
        if on_branch:
            assert worktree is not None
            wt = Git(worktree)
        else:
            tmp = Path(tempfile.mkdtemp(prefix=f"orch-rebase-{task.id}-"))
            stack.callback(shutil.rmtree, tmp, ignore_errors=True)
            repo.run("worktree", "add", "--quiet", "--detach", str(tmp / "wt"), ch.tip)
            stack.callback(repo.run, "worktree", "remove", "--force", str(tmp / "wt"),
                           check=False)
            wt = Git(tmp / "wt")
        where = [target_tip] if upstream is None else ["--onto", target_tip, upstream]
        out = wt.run("rebase", "--no-autosquash", "--no-verify", *where, check=False)
        if out.returncode != 0:
            files = wt.out("diff", "--name-only", "--diff-filter=U").split()
            wt.run("rebase", "--abort", check=False)
            what = f"conflicts in: {', '.join(files)}" if files else out.stderr.strip()
            raise Conflict(f"{task.id}: rebasing {ch.branch} onto the target stopped "
                           f"({what}); nothing was merged — try a merge or squash instead")
        new_tip = wt.out("rev-parse", "HEAD")
        if not on_branch:
            repo.run("update-ref", f"refs/heads/{ch.branch}", new_tip, ch.tip)
    return new_tip


def _land(repo: Git, target: str, old: str, new: str, main: str | None, msg: str) -> None:
    if new == old:
        return
    if target == main:
        out = repo.run("merge", "--ff-only", "--quiet", new, check=False)
        if out.returncode != 0:
            raise Conflict(f"could not update {target} in the main working tree: "
                           f"{out.stderr.strip() or out.stdout.strip()}; nothing was merged")
        return
    out = repo.run("update-ref", "-m", msg, f"refs/heads/{target}", new, old, check=False)
    if out.returncode != 0:
        raise Conflict(f"{target} moved while merging ({out.stderr.strip()}); try again")


def unland(repo: Git, target: str, new: str, old: str, main: str | None) -> None:
    """Undo `_land` after the remote refused the push: the target is back where it was."""
    if target == main:
        repo.run("reset", "--quiet", "--keep", old, check=False)
    else:
        repo.run("update-ref", f"refs/heads/{target}", old, new, check=False)


def cleanup(layout: Layout, config: Config, board: ControlPlane, result: MergeResult) -> None:
    """Remove the merged task's worktree and branch; the task stays merged when that fails."""
    from orchestrator.worktree import open_isolation

    manager = open_isolation(layout, config.worktree, board, actor="review")
    # its commits are reachable from the target
    merged_into = msgspec.structs.replace(result.task, base=result.into)
    try:
        result.snapshot = manager.remove(merged_into, force=result.strategy == "squash")
    except (RunError, Conflict) as exc:
        result.note = f"merged, but the worktree was kept: {exc} (orchestrator gc removes it " \
                      "later)"
    else:
        result.removed = True
        kept = getattr(manager, "kept_ignored", None)
        if kept is not None:
            result.note = f"its gitignored files are kept in {kept}"


def _named(paths: list[str]) -> str:
    return ", ".join(paths[:MAX_NAMED]) + ("…" if len(paths) > MAX_NAMED else "")
