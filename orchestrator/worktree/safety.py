"""Fail-closed removal: what would be lost, and the snapshot that keeps it anyway.

`risks` lists every reason removing a worktree and its branch could lose work:
uncommitted or untracked changes, commits not reachable from any base, and
anything it cannot check (a missing base, a broken worktree, a git error).
An empty list is the only answer that allows a removal without ``force``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import GitError
from orchestrator.git import Git, list_worktrees
from orchestrator.git import worktree_git_dir as linked_git_dir

TASK_REF = ".task_ref"
MAX_TASK_REF = 1 << 16
"""``.task_ref`` is a few hundred bytes; a larger one is not ours."""
SNAPSHOT_PREFIX = "refs/orchestrator/snapshots/"
MAX_NAMED = 5


@dataclass
class Checkout:
    """What is on disk for one task: its worktree folder (when it is a real one), the tips
    of its work, and the commits its bases name."""

    path: Path | None
    """The worktree folder, None when it is gone or is not a worktree of its own."""
    git_dir: Path | None
    head: str | None
    branch_tip: str | None
    base_commits: list[str]

    @property
    def tips(self) -> list[str]:
        return sorted({t for t in (self.head, self.branch_tip) if t})


def inspect(repo: Git, path: Path, branch: str | None, bases: Sequence[str] = (),
            common_dir: Path | None = None, git_dir: Path | None = None) -> Checkout:
    """Resolve the branch tip and the bases (one git call), and read the worktree's own
    files: it counts as a worktree only when its ``.git`` file and this repository's
    metadata (under ``common_dir``) point at each other."""
    tip, *base_commits = repo.commits(f"refs/heads/{branch}" if branch else "", *bases)
    known = [c for c in base_commits if c]
    own = worktree_git_dir(path, common_dir)
    if own is None:
        return Checkout(None, None, None, tip, known)
    try:
        head_ref = (own / "HEAD").read_text().strip()
    except OSError:
        head_ref = ""
    if head_ref == f"ref: refs/heads/{branch}":
        head = tip  # None when the branch was deleted by hand: "cannot tell"
    else:
        head = repo.commit_of(head_ref.removeprefix("ref: ")) if head_ref else None
    return Checkout(path, own, head, tip, known)


def worktree_git_dir(path: Path, common_dir: Path | None = None) -> Path | None:
    """The git dir of the linked worktree at ``path`` (``<common>/worktrees/<name>``), or
    None when ``path`` is not one (of the repository at ``common_dir``, when given)."""
    git_dir = linked_git_dir(path)
    if git_dir is None:
        return None
    if common_dir is not None and git_dir.parent.resolve() != (common_dir / "worktrees").resolve():
        return None
    return git_dir


def dirty_paths(path: Path) -> list[str]:
    """Uncommitted and untracked (not ignored) paths of a worktree; `.task_ref` never counts."""
    return scan(path, ignored=False)[0]


def scan(path: Path, *, ignored: bool = True) -> tuple[list[str], list[str]]:
    """(uncommitted and untracked paths, gitignored paths) of a worktree, from one
    ``git status``. An ignored folder is one entry (``node_modules/``): git does not
    look inside a folder an ignore pattern names. `.task_ref` is in neither list."""
    args = ["--ignored=matching"] if ignored else []
    out = Git(path).run("status", "--porcelain=v1", "-z", "--untracked-files=all", *args)
    dirty: list[str] = []
    kept: list[str] = []
    records = iter(out.stdout.split("\0"))
    for rec in records:
        if len(rec) < 4:
            continue
        if rec[0] in "RC":
            next(records, None)  # the rename's source path follows
        rel = rec[3:]
        if rel.rstrip("/") != TASK_REF:
            (kept if rec[:2] == "!!" else dirty).append(rel)
    return dirty, kept


def ahead(repo: Git, tips: Sequence[str], bases: Sequence[str]) -> int:
    """Commits reachable from ``tips`` and from none of ``bases`` (commit ids)."""
    if not tips or set(tips) <= set(bases):
        return 0
    return int(repo.out("rev-list", "--count", *tips, "--not", *bases, "--"))


def risks(repo: Git, co: Checkout, branch: str | None, bases: Sequence[str], *,
          dirty: Sequence[str] | None = None, commits: bool = True) -> list[str]:
    """Why removing this checkout and its branch could lose work (empty: nothing to lose);
    ``dirty``: the worktree's changes when the caller has already listed them (`scan`);
    ``commits=False``: commits not in the base are no risk (the caller snapshots them)."""
    reasons: list[str] = []
    if co.path is not None:
        if co.head is None:
            reasons.append(f"cannot tell: the worktree's HEAD does not resolve "
                           f"(branch {branch} deleted by hand?)")
        try:
            if dirty is None:
                dirty = dirty_paths(co.path)
        except GitError as exc:
            reasons.append(f"cannot tell: {exc}")
        else:
            if dirty:
                named = ", ".join(dirty[:MAX_NAMED]) + ("…" if len(dirty) > MAX_NAMED else "")
                reasons.append(f"{len(dirty)} uncommitted or untracked change(s): {named}")
    if co.tips and not co.base_commits:
        reasons.append(f"cannot tell: the base ({', '.join(bases) or 'none recorded'}) "
                       "does not exist")
    elif co.tips and commits:
        try:
            n = ahead(repo, co.tips, co.base_commits)
        except (GitError, ValueError) as exc:
            reasons.append(f"cannot tell: {exc}")
        else:
            if n:
                reasons.append(f"{n} commit(s) on {branch or 'the worktree'} not reachable "
                               f"from {', '.join(bases)}")
    return reasons


def held_elsewhere(repo: Git, tips: Sequence[str], branch: str | None) -> bool:
    """Whether every commit of ``tips`` is reachable from a ref other than ``branch`` (or
    from the main checkout's HEAD): deleting the branch then loses nothing. Worktree HEADs
    do not count (``--single-worktree``): the task's own worktree is going too."""
    if not tips:
        return True
    exclude = [f"--exclude=refs/heads/{branch}"] if branch else []
    out = repo.run("rev-list", "-n1", *tips, "--not", "--single-worktree", *exclude, "--all")
    return not out.stdout.strip()


def checked_out_at(repo: Git, branch: str, own: Path | None = None) -> str | None:
    """Where ``branch`` is checked out: the main checkout or a worktree (its folder); None
    when nowhere. The worktree at ``own`` (the task's own, being removed) does not count."""
    mine = own.resolve() if own is not None else None
    for i, entry in enumerate(list_worktrees(repo)):
        if entry.branch == branch and entry.path.resolve() != mine:
            return "the main checkout" if i == 0 else str(entry.path)
    return None


def snapshot(repo: Git, task_id: str, co: Checkout, branch: str | None) -> str | None:
    """Save the worktree's full content (tracked and untracked, not ignored) as a commit
    whose parents are the branch tip, HEAD and any earlier snapshot of the task, under
    ``refs/orchestrator/snapshots/<task_id>``. None when there is nothing at all to save."""
    ref = SNAPSHOT_PREFIX + task_id
    earlier = repo.commit_of(ref)
    parents = list(dict.fromkeys(t for t in (co.branch_tip, co.head, earlier) if t))
    if co.path is not None and co.git_dir is not None:
        tree = _working_tree(co.path, co.git_dir)
    elif parents:
        tree = repo.out("rev-parse", f"{parents[0]}^{{tree}}")
    else:
        return None
    args = [a for p in parents for a in ("-p", p)]
    msg = f"orchestrator snapshot of {task_id}" + (f" ({branch})" if branch else "")
    commit = repo.out("commit-tree", tree, *args, "-m", msg)
    repo.run("update-ref", "-m", msg, ref, commit)
    return ref


def _working_tree(path: Path, git_dir: Path) -> str:
    """A tree of the working directory, built in a temporary index (the real one untouched)."""
    with tempfile.TemporaryDirectory(prefix="orch-snap-") as tmp:
        index = Path(tmp) / "index"
        if (git_dir / "index").exists():
            shutil.copyfile(git_dir / "index", index)  # keeps stat data: only changes are hashed
        env = {"GIT_INDEX_FILE": str(index)}
        wt = Git(path)
        wt.run("add", "-A", "--", ".", env=env)  # .task_ref: excluded by info/exclude
        return wt.out("write-tree", env=env)
