"""What review shows of each kept branch, asked of git once per pair of commits.

For each branch: where it starts (`Changes`), its facts (commits, diffstat, symlinks that
point outside, control files), and whether it merges cleanly into the target now. Each
answer is kept in the `PairCache` under the commits it was asked of, and carried over
from an older commit of a base or target that only gained commits the branch does not
care about (`_same_fork`, `_same_merge`).

``review`` reads every kept branch at once (`kept_branches`, `merge_answers`); a teammate
asks the same of its task's branch as the task reaches review (`remember`), so a
person's first ``review`` after a team's run reads the answers instead of asking git
thousands of times.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeAlias

from orchestrator.branches.cache import PairCache, dumps, loads
from orchestrator.branches.changes import (
    Changes,
    current_branch,
    diffstat,
    merge_conflicts,
    outside_links,
)
from orchestrator.branches.control import control_changes
from orchestrator.errors import GitError, RunError
from orchestrator.git import Git
from orchestrator.model import Task

Kept: TypeAlias = tuple[Changes, dict[str, Any]]
"""A kept branch: its changes, and their facts (commits, diffstat, links, control files)."""


def remember(root: Path, task: Task) -> None:
    """Ask git now what ``review`` will ask about ``task``'s branch (its fork, its facts,
    whether it merges into the target) and keep the answers in the cache. `RunError` when
    they cannot be kept (`PairCache.problem`); `GitError` or `OSError` when git cannot be
    asked. What git cannot tell about the branch is left for ``review`` to report."""
    repo = Git(root)
    with PairCache(git_dir(repo)) as cache:
        if cache.db is None:  # nowhere to keep the answers: do not ask
            raise RunError(f"the review cache cannot be used: {cache.problem}")
        main = current_branch(repo)
        kept, _ = kept_branches(repo, [task], main, cache)
        merge_answers(repo, [(task, ch) for ch, _ in kept.values()], main, cache, kept)
        cache.save()
        if cache.problem:
            raise RunError(f"the review cache cannot be written: {cache.problem}")


def git_dir(repo: Git) -> Path | None:
    out = repo.run("rev-parse", "--git-common-dir", check=False)
    if out.returncode != 0:
        return None
    path = Path(out.stdout.strip())
    return path if path.is_absolute() else (Path(repo.cwd) / path).resolve()


def kept_branches(repo: Git, tasks: list[Task], main: str | None, cache: PairCache
                  ) -> tuple[dict[str, Kept], dict[str, str]]:
    """Each kept branch's changes and their facts (commits, diffstat, outside symlinks),
    and the error of each branch that cannot be read; what `changes` answers, for all of
    them at once: the branches and bases resolved in one git call, the rest from the
    cache where it was asked before."""
    starts = _starts(repo, tasks, main, cache)
    errors = {tid: start for tid, start in starts.items() if isinstance(start, str)}
    found = [start for start in starts.values() if isinstance(start, Changes)]
    known = cache.get_many("facts", [(ch.base, ch.tip) for ch in found])
    kept: dict[str, Kept] = {}
    for ch in found:
        try:
            kept[ch.task_id] = (ch, _facts(repo, cache, known.get((ch.base, ch.tip)), ch))
        except GitError as exc:
            errors[ch.task_id] = str(exc)
    return kept, errors


def _starts(repo: Git, tasks: list[Task], main: str | None,
            cache: PairCache) -> dict[str, Changes | str]:
    """Where each branch starts (`_start`), or why that cannot be told."""
    revs = sorted({r for t in tasks for r in (f"refs/heads/{t.branch}", t.base, main,
                                              t.base_commit) if r})
    commit = dict(zip(revs, repo.commits(*revs), strict=True))
    tips = {t.id: commit.get(f"refs/heads/{t.branch}") for t in tasks}
    bases = {t.id: [(ref, c) for ref in (t.base, main) if ref and (c := commit.get(ref))]
             for t in tasks}
    forks = _Forks(repo, cache, [(tip, c) for tid, tip in tips.items() if tip
                                 for _, c in bases[tid]])
    return {t.id: _start(t, tips[t.id], bases[t.id], forks, commit) for t in tasks}


def _start(t: Task, tip: str | None, bases: list[tuple[str, str]], forks: _Forks,
           commit: dict[str, str | None]) -> Changes | str:
    """A branch's changes from the first of ``bases`` (its own base, then the target) it
    forks from, else from the commit it started at; or why that cannot be told."""
    if tip is None:
        return f"{t.id}: its branch {t.branch} is missing (deleted by hand?)"
    for ref, c in bases:
        if fork := forks.of(tip, c):
            return Changes(t.id, t.branch or "", tip, fork, ref)
    if t.base_commit and commit.get(t.base_commit):
        return Changes(t.id, t.branch or "", tip, t.base_commit, t.base_commit[:12])
    return (f"{t.id}: cannot tell where {t.branch} started (its base "
            f"{t.base or t.base_commit or '?'} is gone)")


class _Forks:
    """Where branches forked from bases ("": nowhere): the cache's answers, asked for
    all ``pairs`` of tip and base at once; else carried over from an older base
    (`_same_fork`); else git's merge base, then cached."""

    def __init__(self, repo: Git, cache: PairCache, pairs: list[tuple[str, str]]) -> None:
        self.repo, self.cache, self.moves = repo, cache, _Moves(repo)
        self.known = cache.get_many("forks", pairs)

    def of(self, tip: str, base: str) -> str:
        fork = self.known.get((tip, base))
        if fork is None:
            fork = _same_fork(self.cache, self.moves, tip, base)
        if fork is None:
            out = self.repo.run("merge-base", base, tip, check=False)
            fork = out.stdout.strip() if out.returncode == 0 else ""
            self.cache.put("forks", tip, base, fork)
        return fork


def _facts(repo: Git, cache: PairCache, raw: str | None, ch: Changes) -> dict[str, Any]:
    """A branch's commits, diffstat, outside symlinks and control files: ``raw`` from the
    cache, else from git (then cached)."""
    if raw is not None:
        return dict(loads(raw))
    stat = diffstat(repo, ch)
    own = repo.out("rev-list", f"{ch.base}..{ch.tip}").split()
    facts = {**stat, "commits": len(own), "own": own[:MAX_OWN],
             "links": outside_links(repo, ch),
             "control": control_changes(repo, ch.base, ch.tip,
                                        (f["path"] for f in stat["files"]))}
    cache.put("facts", ch.base, ch.tip, dumps(facts))
    return facts


MAX_OWN = 1000
"""A branch's own commits kept with its facts, at most (more: its fork is asked again when
its base moves, see `_same_fork`)."""


class _Moves:
    """What a branch gained from an older commit to a newer one: its new commits and the
    files they change (None when the older is no ancestor); git is asked once per pair."""

    def __init__(self, repo: Git) -> None:
        self.repo = repo
        self.seen: dict[tuple[str, str], tuple[set[str], set[str]] | None] = {}

    def since(self, old: str, new: str) -> tuple[set[str], set[str]] | None:
        if (old, new) not in self.seen:
            moved = None
            if self.repo.ok("merge-base", "--is-ancestor", old, new):
                commits = set(self.repo.out("rev-list", f"{old}..{new}").split())
                out = self.repo.run("diff", "--name-only", "-z", "--no-renames", old, new)
                moved = (commits, {p for p in out.stdout.split("\0") if p})
            self.seen[(old, new)] = moved
        return self.seen[(old, new)]


def _same_fork(cache: PairCache, moves: _Moves, tip: str, base: str) -> str | None:
    """The fork of ``tip`` from ``base`` without git, when it was asked of an older commit
    of the base that ``base`` descends from, and none of the commits the base gained since
    is one of the branch's own (then the merge base cannot have moved); else None."""
    for old, fork in cache.earlier("forks", tip):
        if not fork or (moved := moves.since(old, base)) is None:
            continue
        raw = cache.get_many("facts", [(fork, tip)]).get((fork, tip))
        facts = loads(raw) if raw is not None else None
        if facts is None or "own" not in facts or len(facts["own"]) < facts["commits"]:
            continue
        if not moved[0] & set(facts["own"]):
            cache.put("forks", tip, base, fork)
            return str(fork)
    return None


def _same_merge(cache: PairCache, moves: _Moves, kept: Kept, target: str) -> str | None:
    """``git merge-tree``'s answer for ``target`` without git, when it was asked of an
    older target commit that ``target`` descends from, the branch forks from both at the
    same commit, and what the target gained since touches none of the branch's files:
    the merge then meets the same changes on both sides; else None."""
    ch, facts = kept
    files = {f["path"] for f in facts["files"]}
    for old, raw in cache.earlier("merges", ch.tip):
        if cache.get_many("forks", [(ch.tip, old), (ch.tip, target)]) != {
                (ch.tip, old): ch.base, (ch.tip, target): ch.base}:
            continue
        moved = moves.since(old, target)
        if moved is not None and not moved[1] & files:
            return raw
    return None


def merge_answers(repo: Git, shown: list[tuple[Task, Changes]], main: str | None,
                  cache: PairCache, kept: dict[str, Kept]
                  ) -> dict[str, dict[str, Any] | None]:
    """Whether each branch merges cleanly into its target now (``git merge-tree``, once
    per pair of target and tip, or carried over from an older target, `_same_merge`)."""
    targets = sorted({target for t, _ in shown if (target := main or t.base)})
    tip_of = dict(zip(targets, repo.commits(*(f"refs/heads/{x}" for x in targets)),
                      strict=True))
    pairs = {t.id: (target, tip_of.get(target), ch.tip) for t, ch in shown
             if (target := main or t.base)}
    known = cache.get_many("merges", [(c, tip) for _, c, tip in pairs.values() if c])
    out: dict[str, dict[str, Any] | None] = {t.id: None for t, _ in shown}
    moves = _Moves(repo)
    for tid, (target, c, tip) in pairs.items():
        if c is None:
            continue
        try:
            conflicts = loads(_merge(repo, cache, moves, known.get((c, tip)), kept[tid], c))
        except GitError as exc:
            out[tid] = {"into": target, "clean": None, "conflicts": [], "error": str(exc)}
            continue
        out[tid] = {"into": target, "clean": not conflicts, "conflicts": conflicts}
    return out


def _merge(repo: Git, cache: PairCache, moves: _Moves, raw: str | None, kept: Kept,
           target: str) -> str:
    """The conflicts of a kept branch's merge into the commit ``target`` (as JSON): ``raw``
    from the cache, else carried over from an older target (`_same_merge`), else
    ``git merge-tree``'s answer (then cached)."""
    if raw is not None:
        return raw
    tip = kept[0].tip
    raw = _same_merge(cache, moves, kept, target)
    if raw is None:
        raw = dumps(merge_conflicts(repo, target, tip)[1])
    cache.put("merges", target, tip, raw)
    return raw
