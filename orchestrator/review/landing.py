"""The merge queue (``orchestrator land``): merge reviewed tasks one by one, each verified
on the result it makes, before the target branch moves.

    order       blockers before the tasks stacked on them, then priority (higher first),
                then id
    restack     a stacked task whose blocker changed after it started (the blocker's
                landed tip is not in its branch) is rebased onto the target first
                (``git rebase --onto``); a rebase that conflicts re-runs the task
    build       the merge commit, as ``merge`` makes it (`orchestrator.review.merging`):
                ``git merge-tree`` first, conflicts reject the task
    verify      the verify command (``--verify``, default ``team.verify``) in the land tree,
                a worktree of its own checked out at the merge result
    land        the target moves with ``update-ref`` from the old value (or ``merge
                --ff-only`` when it is checked out in the main working tree)
    push        across machines (a shared remote), the target is pushed as ``merge``
                pushes it; a rejected push moves the target back and leaves the tasks in
                review waiting for a person (a ``push_rejected`` wait, the reason in
                ``error``): a task is ``merged`` only once the remote has it
    finish      the task is ``merged``, its worktree and branch removed

A rejected task (conflict, failing checks, failed rebase) goes back to its agent as a
retry with the output as feedback, or — with ``retry=False``, or after
`MAX_LAND_RETRIES` rejections of the same task — stays in review with the reason in its
``error``, waiting for a person. Tasks stacked on a rejected task are skipped (their
branches hold its work). The queue goes on with the others on top of what did land.

The target only ever moves in one ``update-ref``: a ``land`` killed at any point leaves it
at the commit before a task or after it, never half-merged; the land tree is made again
by the next run.

Batching (``batch=N``) verifies up to N tasks merged together and lands them in one
move; a failing batch is split in halves and each half landed on its own (bisection).

Events: ``land_started``, ``land_verified``, ``land_rejected``, ``land_skipped``,
``merged`` (the same event ``merge`` writes) and ``task_merged`` (with the queue's
figures), ``land_finished``.
"""

from __future__ import annotations

import contextlib
import heapq
import shutil
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from orchestrator.branches.changes import current_branch
from orchestrator.branches.control import control_changes, describe_control
from orchestrator.checks import run_checks
from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.errors import Conflict, GitError, InvalidInput, OrchestratorError, RunError
from orchestrator.events import (
    LandFinished,
    LandingRejected,
    LandNote,
    LandRestacked,
    LandSkipped,
    LandStarted,
    LandVerified,
    Merged,
    TaskMerged,
)
from orchestrator.git import Git
from orchestrator.layout import Layout
from orchestrator.model import (
    LAND_FEEDBACK,
    Status,
    Task,
    normalize_task_id,
    parse_task_id,
)
from orchestrator.procutil import user_environ
from orchestrator.review.common import using_board
from orchestrator.review.merging import (
    MergeResult,
    Prepared,
    build,
    check_strategy,
    cleanup,
    finish,
    land_commit,
    merge_lock,
    prepare,
    rebase_onto,
    unland,
)
from orchestrator.review.retrying import retry_task
from orchestrator.sandbox import task_sandbox
from orchestrator.secrets import safe_env
from orchestrator.waits import LandRejected, MergeConflict, PushRejected, Wait
from orchestrator.worktree.names import check_branch
from orchestrator.worktree.remote import Remote

MAX_LAND_RETRIES = 2
"""Rejections of one task that go back to its agent; after that it waits for a person."""
"""The prefix of the feedback a land rejection adds (counted for `MAX_LAND_RETRIES`)."""
FEEDBACK_TAIL_CHARS = 4000
MOVED_RETRIES = 3
"""Times one step is built again when the target moved meanwhile (a manual ``merge``)."""


class Outcome(BaseModel):
    task: str
    result: str
    """``landed``, ``rejected`` or ``skipped``."""
    reason: str | None = None
    commit: str | None = None
    """The target's tip after it landed."""
    retried: bool = False
    """A rejected task went back to its agent (else it waits in review)."""
    verify_seconds: float | None = None


class LandReport(BaseModel):
    into: str | None = None
    verify: str
    outcomes: list[Outcome] = Field(default_factory=list)
    verifications: int = 0
    """How many times the verify command ran."""
    seconds: float = 0.0
    stopped: bool = False
    """A stop request (SIGTERM) ended the queue early; the rest stays in review."""

    @property
    def landed(self) -> list[str]:
        return [o.task for o in self.outcomes if o.result == "landed"]

    @property
    def rejected(self) -> list[str]:
        return [o.task for o in self.outcomes if o.result == "rejected"]


class Rejected(Exception):
    """A task cannot land; carries the reason, the output for the agent, and the files."""

    def __init__(self, reason: str, output: str = "", wait: Wait | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.output = output
        self.wait = wait or LandRejected(reason=reason[:2000])
        """What the task waits for when it stays in review."""


def land_order(tasks: Sequence[Task]) -> list[Task]:
    """Blockers first (among ``tasks``), then higher priority, then lower id."""
    by_id = {t.id: t for t in tasks}
    waiting = {t.id: {b for b in t.blocked_by if b in by_id and b != t.id} for t in tasks}
    heap = [(-t.priority, parse_task_id(t.id), t.id) for t in tasks if not waiting[t.id]]
    heapq.heapify(heap)
    out: list[Task] = []
    while heap:
        _, _, tid = heapq.heappop(heap)
        out.append(by_id[tid])
        for other, blockers in waiting.items():
            if tid in blockers:
                blockers.discard(tid)
                if not blockers:
                    t = by_id[other]
                    heapq.heappush(heap, (-t.priority, parse_task_id(t.id), t.id))
    left = [by_id[t] for t in sorted(waiting, key=parse_task_id) if by_id[t] not in out]
    return out + left  # a cycle: they are skipped when their turn comes (blocker not merged)


def land_tasks(layout: Layout, config: Config, ids: Sequence[str] | None = None, *,
               into: str | None = None, verify: str | None = None, retry: bool = True,
               strategy: str = "merge", batch: int = 1, actor: str = "land",
               board: ControlPlane | None = None, stop: threading.Event | None = None,
               progress: Callable[[Outcome], None] | None = None,
               named: Collection[str] = ()) -> LandReport:
    """Land ``ids`` (default: every task in review) into ``into``; see the module docstring.

    A task whose branch changes control files (`orchestrator.branches.control`) lands only
    when it is in ``named`` (a person named it); otherwise it is skipped, and marked so that
    the lead stops offering it. Bad arguments raise before anything happens; each task's
    fate is in the report. With a forge (``[forge]``), each pull request is merged there in
    this order instead."""
    check_strategy(strategy)
    named = frozenset(normalize_task_id(i) for i in named)
    if config.forge.kind != "none":
        from orchestrator.forge.merging import land_on_forge

        return land_on_forge(layout, config, ids, strategy=strategy, actor=actor, board=board,
                             progress=progress, named=named)
    if batch < 1:
        raise InvalidInput(f"--batch must be 1 or more, not {batch}")
    command = (verify if verify is not None else config.team.verify or "").strip()
    if not command:
        raise InvalidInput("no verify command: pass --verify CMD or set team.verify "
                           "(orchestrator config set team.verify 'pytest -q')")
    if into is not None:
        check_branch(into, "--into branch")
    started = time.monotonic()
    with using_board(layout, config, board, actor) as b:
        tasks = _selected(b, ids)
        queue = Queue(layout, config, b, command, retry=retry, strategy=strategy, into=into,
                      actor=actor, progress=progress, stop=stop or threading.Event(),
                      named=named)
        report = queue.report
        if tasks:
            b.events.emit(LandStarted(tasks=[t.id for t in tasks], verify=command,
                                      batch=batch), None, actor=actor)
            with verify_tree(Git(layout.root), layout.run / "land") as tree:
                queue.tree = tree
                try:
                    with contextlib.suppress(_Stopped):
                        queue.run(land_order(tasks), batch)
                finally:
                    queue.cleanups.shutdown(wait=True)
        report.seconds = round(time.monotonic() - started, 3)
        if tasks:
            b.events.emit(LandFinished(landed=report.landed, rejected=report.rejected,
                                       seconds=report.seconds,
                                       verifications=report.verifications), None, actor=actor)
    return report


def _selected(board: ControlPlane, ids: Sequence[str] | None) -> list[Task]:
    if not ids:
        return board.list(Status.REVIEW)
    tasks = [board.get(i) for i in dict.fromkeys(ids)]
    for t in tasks:
        if t.status is not Status.REVIEW:
            raise Conflict(f"{t.id} is {t.status}: only tasks in review can land")
    return tasks


@dataclass
class Queue:
    layout: Layout
    config: Config
    board: ControlPlane
    verify: str
    retry: bool
    strategy: str
    into: str | None
    actor: str
    progress: Callable[[Outcome], None] | None
    stop: threading.Event
    named: frozenset[str] = frozenset()
    """Tasks a person named: they land even when they change control files."""
    tree: Path = Path()
    cleanups: ThreadPoolExecutor = field(init=False)
    """One thread removing landed tasks' worktrees while the queue goes on."""
    report: LandReport = field(init=False)
    repo: Git = field(init=False)

    main: str | None = field(init=False)
    """The main working tree's branch, read once: a land moves it only by fast-forward."""
    main_checked: bool = field(init=False, default=False)
    remote: Remote | None = field(init=False, default=None)
    """The shared remote of a team across machines, which every landing is pushed to."""

    def __post_init__(self) -> None:
        self.report = LandReport(into=self.into, verify=self.verify)
        self.repo = Git(self.layout.root)
        self.main = current_branch(self.repo)
        self.cleanups = ThreadPoolExecutor(1, thread_name_prefix="land-cleanup")
        self.remote = Remote.for_config(self.layout.root, self.config)

    def run(self, order: list[Task], batch: int) -> None:
        pending = [t.id for t in order]
        while pending:
            if self.stop.is_set():
                raise _Stopped
            group, pending = pending[:batch], pending[batch:]
            self.land_group(group)

    # --- one group: build the chain, verify it, land it or split it ---------------------
    def land_group(self, group: list[str]) -> None:
        """Land ``group`` in one move of the target, or split it and land each half."""
        for _ in range(MOVED_RETRIES):
            try:
                with merge_lock(self.layout):
                    self.land_chain(group)
                return
            except _Moved:
                continue  # a manual merge moved the target meanwhile: build again on it
            except _Split as split:  # outside the lock: each half takes it again
                for part in split.halves:
                    self.land_group(part)
                return
        for tid in group:
            self.skip(tid, f"{self.into or 'the target'} kept moving while landing; try again")
        return

    def land_chain(self, group: list[str]) -> None:
        chain = self.chain(group)
        if not chain:
            return
        ids = [p.task.id for p, _ in chain]
        old, tip = chain[0][0].target_tip, chain[-1][1]
        try:
            seconds = self.verify_commit(tip, ids)
        except Rejected as rej:
            if len(chain) == 1:
                self.reject(chain[0][0].task, rej)
                return
            half = len(ids) // 2
            raise _Split((ids[:half], ids[half:])) from rej
        try:
            land_commit(self.repo, chain[-1][0], old, tip, f"orchestrator: land {' '.join(ids)}")
        except Conflict as exc:
            raise _Moved from exc
        refused = self.push(chain[-1][0], old, tip)
        if refused:
            for prep, _ in chain:
                self.push_rejected(prep.task, refused)
            return
        for prep, _ in chain:
            self.landed(prep, tip, seconds)

    def chain(self, group: list[str]) -> list[tuple[Prepared, str]]:
        """Each task of ``group`` built on the one before (the first on the target's tip);
        a task that cannot be built is rejected or skipped and left out."""
        out: list[tuple[Prepared, str]] = []
        for tid in group:
            try:
                task = self.board.get(tid)
                if task.status is not Status.REVIEW:
                    raise _Skip(f"it is {task.status} now, not review")
                chained = {p.task.id for p, _ in out}
                for b in task.blocked_by:
                    if b not in chained and self.board.get(b).status is not Status.MERGED:
                        raise _Skip(f"its blocker {b} is not merged")
                prep = prepare(self.layout, self.repo, task, self.into, main=self.main,
                               main_checked=self.main_checked, config=self.config,
                               board=self.board)
                self.main_checked = True  # the first prepare checked it
                self.check_control(prep)
                onto = out[-1][1] if out else prep.target_tip
                prep = self.restack(prep, onto)
                commit = build(self.repo, prep, self.strategy, onto)
            except _Skip as skip:
                self.skip(tid, str(skip))
                continue
            except Rejected as rej:
                self.reject(task, rej)
                continue
            except Conflict as exc:
                if "would conflict in" in str(exc):
                    files = str(exc).split("would conflict in: ", 1)[1].split("; ", 1)[0]
                    self.reject(task, Rejected(str(exc), wait=MergeConflict(
                        into=self.into or self.main or "the target",
                        files=files.split(", ")[:50])))
                else:
                    self.skip(tid, str(exc))
                continue
            except (RunError, OrchestratorError) as exc:
                self.skip(tid, str(exc))
                continue
            out.append((prep, commit))
        return out

    def check_control(self, prep: Prepared) -> None:
        """`_Skip` a task that changes control files and that no person named; its error
        says so (and keeps the lead's ``up --land`` from offering it again)."""
        task = prep.task
        if task.id in self.named:
            return
        files = control_changes(self.repo, prep.ch.base, prep.ch.tip)
        if files:
            reason = describe_control(files, task.id)
            self.board.edit(task.id, actor=self.actor, error=f"{LAND_FEEDBACK} {reason}")
            raise _Skip(reason)

    def restack(self, prep: Prepared, onto: str) -> Prepared:
        """Rebase a stacked task whose blocker landed with work its branch does not have."""
        task = prep.task
        if not task.blocked_by or not task.base_commit:
            return prep
        changed = [b for b in task.blocked_by
                   if (tip := _landed_tip(self.board, b)) is not None
                   and not self.repo.ok("merge-base", "--is-ancestor", tip, prep.ch.tip)]
        if not changed:
            return prep
        try:
            new_tip = rebase_onto(self.repo, task, prep.ch, onto, prep.worktree,
                                  upstream=task.base_commit)
        except Conflict as exc:
            raise Rejected(f"its blocker {', '.join(changed)} changed after it started, and "
                           f"rebasing onto the landed work conflicts: {exc}") from exc
        self.board.events.emit(LandRestacked(blockers=changed, old_tip=prep.ch.tip,
                                             new_tip=new_tip), task.id, actor=self.actor)
        return prepare(self.layout, self.repo, self.board.get(task.id), self.into,
                       main=self.main, main_checked=self.main_checked, config=self.config,
                       board=self.board)

    def verify_commit(self, commit: str, ids: list[str]) -> float:
        """Check out ``commit`` in the land tree and run the verify command; `Rejected`
        with its output when it fails. Returns the seconds it took."""
        _checkout(self.tree, commit)
        log = self.board.logs.writer(ids[0], actor=self.actor)
        env = {**safe_env(user_environ(self.layout.root), self.config.agent.pass_env),
               "ORCH_TASK_ID": ids[0],
               "ORCH_LAND_TASKS": " ".join(ids), "ORCH_WORKTREE": str(self.tree),
               "ORCH_LAND": "1"}
        checks = run_checks(self.verify, cwd=self.tree, env=env, log=log,
                            timeout=self.config.team.verify_timeout, stop=self.stop,
                            sandbox=task_sandbox(self.config, root=self.layout.root))
        if checks.stopped:
            self.report.stopped = True
            raise _Stopped
        self.report.verifications += 1
        if not checks.passed:
            together = f" (merged together with {', '.join(ids[1:])})" if len(ids) > 1 else ""
            raise Rejected(f"checks failed on the merge result{together}: {checks.result}: "
                           f"{self.verify}", checks.output_tail)
        for tid in ids:
            self.board.events.emit(LandVerified(commit=commit, command=self.verify,
                                                seconds=checks.seconds,
                                                together=ids if len(ids) > 1 else None),
                                   tid, actor=self.actor)
        return checks.seconds

    def push(self, prep: Prepared, old: str, tip: str) -> str | None:
        """Across machines: push the target that moved to ``tip``; on a refusal move it
        back to ``old`` and return why."""
        if self.remote is None or tip == old:
            return None
        try:
            self.remote.push_base(prep.target)
        except Conflict as exc:
            unland(self.repo, prep.target, tip, old, prep.main)
            return str(exc)
        return None

    # --- outcomes -------------------------------------------------------------------
    def push_rejected(self, task: Task, reason: str) -> None:
        remote = self.remote.name if self.remote is not None else "the remote"
        self.board.events.emit(LandingRejected(reason=reason, retried=False), task.id,
                               actor=self.actor)
        self.board.edit(task.id, actor=self.actor, error=reason,
                        wait=PushRejected(reason=reason[:2000], remote=remote))
        self._add(Outcome(task=task.id, result="rejected", reason=reason))

    def landed(self, prep: Prepared, tip: str, seconds: float) -> None:
        result = finish(self.layout, self.config, self.board, prep, self.strategy, tip,
                        actor=self.actor, remove=False)
        # removing the worktree and branch overlaps the next task's verify
        self.cleanups.submit(self.remove, result)
        self.board.events.emit(TaskMerged(into=result.into, commit=tip, branch=result.branch,
                                          verify_seconds=seconds), prep.task.id,
                               actor=self.actor)
        self._add(Outcome(task=prep.task.id, result="landed", commit=tip,
                          verify_seconds=seconds))
        self.report.into = result.into

    def remove(self, result: MergeResult) -> None:
        from orchestrator.board import open_board

        try:
            with open_board(self.layout, self.config.board, actor=self.actor) as board:
                cleanup(self.layout, self.config, board, result)
        except Exception as exc:  # the task is merged; gc removes the rest later
            result.note = f"merged, but the worktree was kept: {type(exc).__name__}: {exc}"
        if result.note:
            self.board.events.emit(LandNote(note=result.note), result.task.id,
                                   actor=self.actor)

    def reject(self, task: Task, rej: Rejected) -> None:
        tail = rej.output[-FEEDBACK_TAIL_CHARS:].strip()
        feedback = f"{LAND_FEEDBACK} {rej.reason}" + (f"\n\n{tail}" if tail else "")
        earlier = sum(1 for f in task.feedback if f.startswith(LAND_FEEDBACK))
        retried = self.retry and earlier < MAX_LAND_RETRIES
        self.board.events.emit(LandingRejected(reason=rej.reason, output=tail, retried=retried),
                               task.id, actor=self.actor)
        if retried:
            retry_task(self.layout, self.config, task.id, feedback, actor=self.actor,
                       board=self.board)
        else:
            self.board.edit(task.id, actor=self.actor, error=feedback, wait=rej.wait)
        self._add(Outcome(task=task.id, result="rejected", reason=rej.reason, retried=retried))

    def skip(self, task_id: str, reason: str) -> None:
        self.board.events.emit(LandSkipped(reason=reason), task_id, actor=self.actor)
        self._add(Outcome(task=task_id, result="skipped", reason=reason))

    def _add(self, outcome: Outcome) -> None:
        self.report.outcomes.append(outcome)
        if self.progress is not None:
            self.progress(outcome)


class _Skip(Exception):
    """A task that is not landed this time and not rejected either (it is not ready)."""


class _Stopped(Exception):
    """A stop request: the queue ends where it is (the target before or after a task)."""


class _Moved(Exception):
    """The target moved between building a chain and landing it."""


class _Split(Exception):
    """A chain of several tasks failed its checks: land each half on its own."""

    def __init__(self, halves: tuple[list[str], list[str]]) -> None:
        super().__init__(halves)
        self.halves = halves


def _landed_tip(board: ControlPlane, task_id: str) -> str | None:
    """The branch tip a merged task landed with (from its ``merged`` event)."""
    try:
        if board.get(task_id).status is not Status.MERGED:
            return None
    except OrchestratorError:
        return None
    tip = None
    for e in board.events.read(task=task_id):
        merged = e.decode()
        if isinstance(merged, Merged) and merged.tip:
            tip = merged.tip
    return tip


@contextlib.contextmanager
def verify_tree(repo: Git, path: Path) -> Iterator[Path]:
    """A worktree of its own (detached) where merge results are checked out and verified;
    one left behind by a killed run is removed first."""
    _remove_tree(repo, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    repo.run("worktree", "add", "--quiet", "--detach", "--no-checkout", str(path), "HEAD")
    try:
        yield path
    finally:
        _remove_tree(repo, path)


def _remove_tree(repo: Git, path: Path) -> None:
    if path.exists():
        repo.run("worktree", "remove", "--force", "--force", str(path), check=False)
        shutil.rmtree(path, ignore_errors=True)
    repo.run("worktree", "prune", check=False)


def _checkout(tree: Path, commit: str) -> None:
    """The land tree at ``commit``: tracked files as committed, untracked files removed
    (ignored ones — caches, installed dependencies — are kept between tasks)."""
    wt = Git(tree)
    try:
        wt.run("checkout", "--quiet", "--force", "--detach", commit)
        wt.run("clean", "-ffdq")
    except GitError as exc:
        raise RunError(f"cannot check out the merge result in {tree}: {exc}") from exc


def land_rows(board: ControlPlane, task_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The last land event of each of ``task_ids`` (for the review table); one task's
    events are read without scanning the whole log."""
    last: dict[str, dict[str, Any]] = {}
    for tid in task_ids:
        for e in board.events.read(task=tid):
            if str(e.get("event", "")).startswith("land_"):
                last[tid] = {k: e.get(k) for k in ("event", "ts", "reason", "retried")
                             if e.get(k) is not None}
    return last
