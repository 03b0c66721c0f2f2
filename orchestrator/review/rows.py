"""The review table: every task in ``review``, what a reviewer looks at first, and overlaps.

An overlap is another kept branch (any task not merged, discarded or cancelled
that has a branch: in review, retried, running or failed) that changes some of
the same files; merging one of them will likely make the other conflict. Each
row also says whether the branch merges cleanly into the target right now
(``git merge-tree``, nothing touched).
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any, TypeAlias

import msgspec

from orchestrator.budget import describe
from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.errors import GitError
from orchestrator.forge import pull_request
from orchestrator.git import Git
from orchestrator.layout import Layout
from orchestrator.model import CheckResult, Status, Task, task_number
from orchestrator.review.cache import PairCache, dumps, loads
from orchestrator.review.common import using_board
from orchestrator.review.control import control_changes, describe_control
from orchestrator.review.diff import (
    Changes,
    current_branch,
    diffstat,
    merge_conflicts,
    outside_links,
)
from orchestrator.review.landing import land_rows
from orchestrator.worktree.remote import Remote

_Kept: TypeAlias = tuple[Changes, dict[str, Any]]
"""A kept branch: its changes, and their facts (commits, diffstat, links, control files)."""


def review_rows(layout: Layout, config: Config, *, board: ControlPlane | None = None,
                now: float | None = None, only: str | None = None) -> list[dict[str, Any]]:
    """One dict per task in review, oldest id first (the shape of ``review --json``);
    ``only``: the row of that task alone (its overlaps still look at every kept branch).

    Git is asked about each pair of commits once (`orchestrator.review.cache`): a board
    of 2,000 branches in review runs git a few times, not thousands."""
    with using_board(layout, config, board, "cli") as b:
        tasks = b.list()
        shown = [t for t in tasks if t.status is Status.REVIEW and (only is None
                                                                     or t.id == only)]
        lands = land_rows(b, [t.id for t in shown])
    kept, errors, merges = _branches(layout, config, tasks, shown)
    by_id = {t.id: t for t in tasks}
    overlaps = _Overlaps(kept, by_id)
    clock = time.time() if now is None else now
    rows = []
    for task in shown:
        row = _row(task, clock)
        row["land"] = lands.get(task.id)
        row["stacked_on"] = [{"task": b, "status": str(by_id[b].status)}
                             for b in _unmerged(task, by_id)]
        if task.id in kept:
            row.update(_branch(task, *kept[task.id], merges.get(task.id)))
        else:
            row["error"] = errors.get(task.id, f"{task.id} has no branch")
        row["overlaps"] = overlaps.of(task)
        rows.append(row)
    return rows


def _branches(layout: Layout, config: Config, tasks: list[Task], shown: list[Task]
              ) -> tuple[dict[str, _Kept], dict[str, str], dict[str, dict[str, Any] | None]]:
    """Every kept branch read (`_kept`), and whether those of ``shown`` merge cleanly
    into their target now (`_merges`)."""
    remote = Remote.for_config(layout.root, config)
    if remote is not None and shown:  # branches finished on other machines
        remote.fetch_branches([t.branch for t in shown if t.branch])
    repo = Git(layout.root)
    main = current_branch(repo)
    cache = PairCache(_git_dir(repo))
    try:
        kept, errors = _kept(repo, [t for t in tasks if not t.status.final and t.branch],
                             main, cache)
        merges = _merges(repo, [(t, kept[t.id][0]) for t in shown if t.id in kept],
                         main, cache, kept)
        cache.save()
    finally:
        cache.close()
    return kept, errors, merges


def _branch(task: Task, ch: Changes, facts: dict[str, Any],
            merge: dict[str, Any] | None) -> dict[str, Any]:
    """A kept branch's part of its row: where it starts, what it changes, how it merges."""
    control = facts["control"]
    return dict(base=ch.base_ref, base_commit=ch.base, commits=facts["commits"],
                diffstat={k: facts[k] for k in ("files", "added", "removed")},
                merge=merge, control_files=control,
                warnings=[f"symlink {path} -> {target} points outside the worktree"
                          for path, target in facts["links"]]
                + ([describe_control(control, task.id)] if control else []))


class _Overlaps:
    """Which other kept branches change some of the same files as a task's."""

    def __init__(self, kept: dict[str, _Kept], by_id: dict[str, Task]) -> None:
        self.by_id = by_id
        self.touched = {tid: {f["path"] for f in facts["files"]}
                        for tid, (_, facts) in kept.items()}
        self.by_file: dict[str, list[str]] = {}
        for tid, files in self.touched.items():
            for f in files:
                self.by_file.setdefault(f, []).append(tid)

    def of(self, task: Task) -> list[dict[str, Any]]:
        """The overlaps of ``task``, oldest id first (not the tasks it is stacked on or
        under, `_stacked`)."""
        shared: dict[str, set[str]] = {}
        for f in self.touched.get(task.id, set()):
            for other in self.by_file[f]:
                if other != task.id:
                    shared.setdefault(other, set()).add(f)
        return [{"task": other, "status": str(self.by_id[other].status),
                 "files": sorted(files)}
                for other, files in sorted(shared.items(), key=lambda kv: task_number(kv[0]))
                if not _stacked(task, self.by_id[other])]


def _git_dir(repo: Git) -> Path | None:
    out = repo.run("rev-parse", "--git-common-dir", check=False)
    if out.returncode != 0:
        return None
    path = Path(out.stdout.strip())
    return path if path.is_absolute() else (Path(repo.cwd) / path).resolve()


def _kept(repo: Git, tasks: list[Task], main: str | None, cache: PairCache
          ) -> tuple[dict[str, _Kept], dict[str, str]]:
    """Each kept branch's changes and their facts (commits, diffstat, outside symlinks),
    and the error of each branch that cannot be read; what `changes` answers, for all of
    them at once: the branches and bases resolved in one git call, the rest from the
    cache where it was asked before."""
    starts = _starts(repo, tasks, main, cache)
    errors = {tid: start for tid, start in starts.items() if isinstance(start, str)}
    found = [start for start in starts.values() if isinstance(start, Changes)]
    known = cache.get_many("facts", [(ch.base, ch.tip) for ch in found])
    kept: dict[str, _Kept] = {}
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


def _same_merge(cache: PairCache, moves: _Moves, kept: _Kept, target: str) -> str | None:
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


def _merges(repo: Git, shown: list[tuple[Task, Changes]], main: str | None,
            cache: PairCache, kept: dict[str, _Kept]) -> dict[str, dict[str, Any] | None]:
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


def _merge(repo: Git, cache: PairCache, moves: _Moves, raw: str | None, kept: _Kept,
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


def _unmerged(task: Task, by_id: dict[str, Task]) -> list[str]:
    """Its blockers, and theirs, not merged: what a merge of it brings along (as
    `orchestrator.review.merging.unmerged_blockers`, from the tasks at hand)."""
    out: dict[str, None] = {}
    todo = list(task.blocked_by)
    while todo:
        b = todo.pop()
        t = by_id.get(b)
        if t is None or b in out or b == task.id or t.status is Status.MERGED:
            continue
        out[b] = None
        todo.extend(t.blocked_by)
    return sorted(out)


def _stacked(a: Task, b: Task) -> bool:
    """Whether one task is built on the other (a blocker's branch is its base): their
    branches share the blocker's changes by design, which is no overlap."""
    return (a.id in b.blocked_by or b.id in a.blocked_by
            or (a.branch is not None and a.branch == b.base)
            or (b.branch is not None and b.branch == a.base))


def _row(task: Task, now: float) -> dict[str, Any]:
    return {
        "id": task.id, "subject": task.subject, "branch": task.branch,
        "worktree": task.worktree, "base": task.base, "base_commit": task.base_commit,
        "commits": None, "diffstat": None, "merge": None, "warnings": [], "control_files": [],
        "checks": _checks(task.checks), "cost_usd": round(task.usage.cost_usd, 6),
        "usage": msgspec.to_builtins(task.usage), "budget": msgspec.to_builtins(task.budget),
        "spent": describe(task.budget, task.usage),
        "tokens": task.usage.input_tokens + task.usage.output_tokens,
        "attempts": task.attempts, "feedback": task.feedback,
        "age_seconds": _since(task.updated_at, now),
        "pull_request": pull_request(task.forge),
    }


def _checks(checks: CheckResult | None) -> dict[str, Any] | None:
    """The verification result without its output (``orchestrator logs ID`` has that)."""
    if checks is None:
        return None
    return {"passed": checks.passed, "result": checks.result, "command": checks.command,
            "seconds": checks.seconds, "at": checks.at}


def _since(iso: str, now: float) -> float | None:
    try:
        return round(max(0.0, now - datetime.fromisoformat(iso.replace("Z", "+00:00"))
                         .timestamp()), 1)
    except ValueError:
        return None
