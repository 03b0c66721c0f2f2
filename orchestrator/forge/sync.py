"""One pass of the forge loop (`ForgeSync.run`): what the board and the forge each know,
brought together. The lead's watcher (`orchestrator.forge.watcher`) runs it with back-off;
``orchestrator forge sync`` runs it once.

- **Issues in.** An open issue with ``[forge] issue_label`` written by someone with write
  access becomes a task (``blocked by #N`` is understood when issue N has a task); closing
  it cancels its task while that has not started; reopening it after that makes a new task.
- **A pull request per kept task.** A task in ``review`` has its branch pushed to
  ``[forge] remote`` (with ``--force-with-lease`` on what was pushed last, so a push by
  someone else on the forge is never overwritten) and a pull request opened or updated:
  a stacked task's targets its blocker's branch, and is retargeted when that merges.
- **CI back to the agent.** A failing check on the pushed commit sends the task back to
  ``pending`` (same worktree and conversation) with the check's name, conclusion and the
  tail of its output, up to ``checks.retries`` times; then the task waits for a person
  (a ``ci_exhausted`` wait, `orchestrator.waits.CiExhausted`).
- **Review comments back to the agent.** A review requesting changes, or a comment naming
  ``/orchestrator`` or ``[forge] mention``, by someone with write access sends the task
  back with the comments (file and line for inline ones); orchestrator replies on the
  pull request with what it did. Others' comments are ignored, with an event.
- **Merged there, merged here.** A pull request merged on the forge marks the task merged,
  brings the base branch up to date and removes the worktree as ``merge`` does. A
  discarded or cancelled task's pull request is closed with a comment.

What the forge says is data: titles and bodies are bounded and become a task's subject
and description or an agent's feedback, never a command. A `ForgeError` about one task
is written on that task (``forge.note``) and the pass goes on; a rate limit or an outage
ends the pass (the watcher backs off for the whole board).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.errors import Conflict, GitError, InvalidInput
from orchestrator.events import (
    ForgeCommentIgnored,
    ForgeProblem,
    PrChecks,
    PrClosed,
    PrOpened,
    PrReady,
    PrUpdated,
    Waiting,
)
from orchestrator.forge import (
    AuthFailed,
    Check,
    CiState,
    Feedback,
    Forge,
    ForgeDown,
    ForgeError,
    PullRequest,
    RateLimited,
    cut,
)
from orchestrator.forge.issues import issues_in
from orchestrator.forge.merging import mark_merged
from orchestrator.git import Git
from orchestrator.layout import Layout
from orchestrator.logging import get_logger
from orchestrator.model import ForgeLink, Status, Task
from orchestrator.waits import CiExhausted
from orchestrator.worktree.names import check_branch

if TYPE_CHECKING:
    pass

ACTOR = "forge"
COMMAND = "/orchestrator"
CI_WAIT = "ci_exhausted"
"""The wait (and the ``waiting`` event's reason) of a task whose CI failed
``checks.retries`` times."""


@dataclass
class Outcome:
    """What one pass did, for the console and the tests."""

    opened: list[str] = field(default_factory=list)
    sent_back: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    waiting: bool = False
    """Some pull request's checks are still running (the watcher keeps polling often)."""

    @property
    def changed(self) -> bool:
        return any((self.opened, self.sent_back, self.merged, self.created, self.cancelled,
                    self.closed))


class ForgeSync:
    def __init__(self, layout: Layout, config: Config, board: ControlPlane, forge: Forge) -> None:
        self.layout, self.config, self.board, self.forge = layout, config, board, forge
        self.repo = Git(layout.root)
        self.log = get_logger(actor=ACTOR)
        self._writers: dict[str, bool] = {}
        self._me: str | None = None
        self.ignored_issues: set[int] = set()
        self._tips: dict[str, str] = {}
        self._recent: dict[int, PullRequest] = {}

    # --- the pass ---------------------------------------------------------------------------
    def run(self) -> Outcome:
        """One pass. `RateLimited`, `ForgeDown` and `AuthFailed` end it (they concern every
        task); any other `ForgeError` is noted on its task and the pass goes on."""
        out = Outcome()
        self._writers.clear()
        if self.config.forge.issue_label:
            issues_in(self, self.config.forge.issue_label, out)
        tasks = self.board.list()
        by_branch = {t.branch: t for t in tasks if t.branch}
        self.read_ahead([t for t in tasks if t.status is Status.REVIEW and t.branch])
        for task in tasks:
            try:
                if task.status is Status.REVIEW and task.branch:
                    self.publish(task, by_branch, out)
                elif _to_close(task):
                    self.close(task, out)
            except (RateLimited, ForgeDown, AuthFailed):
                raise
            except (ForgeError, GitError, Conflict, InvalidInput) as exc:
                self.note(task, str(exc), out)
        return out

    def read_ahead(self, kept: list[Task]) -> None:
        """What the pass asks once for all ``kept`` tasks: every branch's commit, and the
        pull requests that changed lately (`_unchanged`)."""
        self._tips = self.tips() if kept else {}
        self._recent = {p.number: p for p in self.forge.recent_pulls()} \
            if any(t.forge and t.forge.pr for t in kept) else {}

    def note(self, task: Task, line: str, out: Outcome) -> None:
        """A line on the task (``show`` prints it) and an event, once per distinct line."""
        line = cut(line, 500)
        out.notes.append(f"{task.id}: {line}")
        link = task.forge or ForgeLink()
        if link.note == line:
            return
        self.save(task, note=line)
        self.board.events.emit(ForgeProblem(problem=line), task.id, actor=ACTOR)
        self.log.warning("forge", task=task.id, problem=line)

    def save(self, task: Task, **changes: Any) -> Task:
        link = msgspec.structs.replace(task.forge or ForgeLink(), **changes)
        return self.board.edit(task.id, actor=ACTOR, forge=link)

    # --- a pull request per kept task ----------------------------------------------------------
    def tips(self) -> dict[str, str]:
        """Every local branch's commit, from one git call."""
        out = self.repo.run("for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/")
        return {ref.removeprefix("refs/heads/"): sha for sha, _, ref in
                (line.partition(" ") for line in out.stdout.splitlines())}

    def publish(self, task: Task, by_branch: dict[str, Task], out: Outcome) -> None:
        """Push a kept task's branch, open or update its pull request (`propose`), record
        it on the task (`linked`), then follow its CI and comments (`watch`)."""
        branch, tip = self.tip(task)
        link = task.forge or ForgeLink()
        base = self.target(task, by_branch)
        pull = self._recent.get(link.pr) if link.pr else None
        if pull is not None and _unchanged(link, pull, tip, base):
            return  # nothing changed here or there since the last close look
        moved = link.pushed != tip
        if moved:
            self.push(branch, link.pushed)
        if link.pr and (pull is None or moved):
            pull = self.forge.get_pull(link.pr)
        if pull is not None and pull.merged:
            by_branch[branch] = self.merged(task, pull, out)  # its dependants retarget
            return
        pull = self.propose(task, pull, tip, base, out)
        linked = self.linked(task, pull, tip, base)
        if pull.state == "open":
            self.watch(linked, pull, out, comments=link.updated != pull.updated)
        elif link.state != "closed":
            self.note(linked, f"pull request #{pull.number} was closed on the forge without "
                              "merging: reopen it there, or discard the task", out)

    def tip(self, task: Task) -> tuple[str, str]:
        """The task's branch (its name checked: it comes from a task file) and its commit."""
        assert task.branch is not None
        check_branch(task.branch, "task branch")
        tip = self._tips.get(task.branch)
        if tip is None:
            raise InvalidInput(f"its branch {task.branch} is gone; nothing to push")
        return task.branch, tip

    def propose(self, task: Task, pull: PullRequest | None, tip: str, base: str,
                out: Outcome) -> PullRequest:
        """The task's pull request: opened when it has none (or a new push follows a closed
        one), else updated with a new push or target."""
        moved = (task.forge or ForgeLink()).pushed != tip
        if pull is None or (pull.state == "closed" and moved):
            pull = self.open(task, base)
            self.board.events.emit(PrOpened(pr=pull.number, url=pull.url, base=base), task.id,
                                   actor=ACTOR)
            out.opened.append(task.id)
        elif moved or pull.base != base:
            pull = self.forge.edit_pull(pull.number, title=_title(task), body=self.body(task),
                                        base=base if pull.base != base else None,
                                        state="open" if pull.state == "closed" else None)
            self.board.events.emit(PrUpdated(pr=pull.number, commit=tip, base=base), task.id,
                                   actor=ACTOR)
        return pull

    def linked(self, task: Task, pull: PullRequest, tip: str, base: str) -> Task:
        """The task with its pull request recorded. A new push starts its CI afresh (and
        ends a wait for it); a pull request whose branch was changed on the forge is left
        alone (`Conflict`)."""
        link = task.forge or ForgeLink()
        if link.pushed != tip:
            link = msgspec.structs.replace(link, ci="none", note=None)
            if isinstance(task.wait, CiExhausted):
                task = self.board.edit(task.id, actor=ACTOR, wait=None)
        elif pull.head_sha != tip and pull.state == "open":
            raise Conflict(f"pull request #{pull.number}'s branch was changed on the forge "
                           f"({pull.head_sha[:12]}, not {tip[:12]}): orchestrator leaves it; "
                           "fetch it into the task or close the pull request")
        link = msgspec.structs.replace(link, pr=pull.number, url=pull.url, pushed=tip,
                                       base=base, state=pull.state,
                                       updated=_settled(pull.updated))
        return task if link == task.forge else self.board.edit(task.id, actor=ACTOR,
                                                                forge=link)

    def open(self, task: Task, base: str) -> PullRequest:
        """Open the task's pull request; when the forge says one is open for the branch
        already (a link lost with a crash between opening and saving it), that one."""
        assert task.branch is not None
        try:
            return self.forge.open_pull(head=task.branch, base=base, title=_title(task),
                                        body=self.body(task), draft=self.config.forge.draft)
        except ForgeError as exc:
            found = self.forge.find_pull(task.branch) if "422" in str(exc) else None
            if found is None or found.state != "open":
                raise
            return found

    def target(self, task: Task, by_branch: dict[str, Task]) -> str:
        """The branch the pull request targets: the blocker's while it is not merged (a
        stacked task), else the base branch (the blocker's own target once it merged)."""
        base = task.base or "HEAD"
        blocker = by_branch.get(base)
        if blocker is not None and blocker.id != task.id:
            if blocker.status is not Status.MERGED:
                return base
            base = (blocker.forge.base if blocker.forge and blocker.forge.base
                    else blocker.base) or "HEAD"
        if base == "HEAD":
            head = self.repo.run("symbolic-ref", "-q", "--short", "HEAD", check=False)
            base = head.stdout.strip() or "main"
        return base

    def push(self, branch: str, pushed: str | None) -> None:
        remote = self.config.forge.remote
        lease = f"--force-with-lease=refs/heads/{branch}:{pushed or ''}"
        out = self.repo.run("push", "--quiet", "--porcelain", lease, remote,
                            f"refs/heads/{branch}:refs/heads/{branch}", check=False)
        if out.returncode != 0:
            why = (out.stderr.strip() or out.stdout.strip()).splitlines()[-1:] or ["?"]
            raise GitError(f"push of {branch} to {remote} was refused: {cut(why[0], 300)} (a "
                           "push to the pull request's branch on the forge is not overwritten)")

    def body(self, task: Task) -> str:
        """The pull request's body: the description, the changes, the checks, the cost and
        the way back to the task."""
        parts = [cut(task.description, 8_000) or "_(no description)_", "", "---"]
        stat = self.repo.run("diff", "--shortstat", f"{task.base_commit}..refs/heads/"
                             f"{task.branch}", check=False) if task.base_commit else None
        if stat is not None and stat.returncode == 0 and stat.stdout.strip():
            parts.append(f"**Changes:** {stat.stdout.strip()}")
        if task.checks:
            parts.append(f"**Checks here:** {'passed' if task.checks.passed else 'failed'} "
                         f"(`{cut(task.checks.command, 200)}`)")
        parts.append(f"**Cost:** ${task.usage.cost_usd:.2f}, {task.usage.tokens:,} tokens, "
                     f"{task.usage.seconds:.0f} s")
        see = f"`orchestrator show {task.id}`"
        if self.config.forge.board_url:
            see += f" · [{task.id} on the board]({self.config.forge.board_url.rstrip('/')}" \
                   f"/task/{task.id})"
        parts.append(f"**Task:** {see}")
        if task.forge and task.forge.issue:
            parts += ["", f"Closes #{task.forge.issue}"]
        parts += ["", f"<sub>Opened by orchestrator. A review that requests changes, or a "
                      f"comment with `{COMMAND} …`, sends it back to its agent.</sub>"]
        return "\n".join(parts)

    # --- CI and comments back to the agent ----------------------------------------------------
    def watch(self, task: Task, pull: PullRequest, out: Outcome, *, comments: bool) -> None:
        link = task.forge
        assert link is not None and link.pushed is not None
        if link.ci in ("none", "pending"):
            checks = self.forge.checks(link.pushed)
            state = ci_state(checks)
            out.waiting = out.waiting or state in ("none", "pending")
            if state != link.ci:
                task = self.save(task, ci=state)
                self.board.events.emit(PrChecks(pr=pull.number, state=state, checks={
                    c.name: c.conclusion for c in checks}), task.id, actor=ACTOR)
                link = task.forge
                assert link is not None
                if state == "failure":
                    self.ci_failed(task, pull, [c for c in checks if c.state == "failure"], out)
                    return
                if state == "success" and pull.draft and self.config.forge.draft:
                    self.forge.ready_for_review(pull)
                    self.board.events.emit(PrReady(pr=pull.number), task.id, actor=ACTOR)
        if comments:  # a review or comment changes the pull request's updated_at
            self.comments(task, pull, out)

    def ci_failed(self, task: Task, pull: PullRequest, failed: list[Check], out: Outcome) -> None:
        link = task.forge
        assert link is not None
        lines = [f"CI failed on pull request #{pull.number}:"]
        for c in failed:
            lines.append(f"- {c.name}: {c.conclusion}" + (f"\n{c.details}" if c.details else ""))
        feedback = cut("\n".join(lines), 12_000)
        if link.ci_rounds >= self.config.checks.retries:
            why = f"{', '.join(c.name for c in failed)[:200]} failed on #{pull.number}"
            self.board.edit(task.id, actor=ACTOR, wait=CiExhausted(reason=why, url=pull.url),
                            error=feedback)
            self.board.events.emit(Waiting(reason=CI_WAIT, pr=pull.number), task.id,
                                   actor=ACTOR)
            self.forge.comment(pull.number, f"CI failed again ({', '.join(c.name for c in failed)}"
                                            f"); {task.id} waits for a person after "
                                            f"{link.ci_rounds} rounds.")
            return
        self.send_back(task, feedback, rounds=link.ci_rounds + 1)  # the red check says enough
        out.sent_back.append(task.id)

    def comments(self, task: Task, pull: PullRequest, out: Outcome) -> None:
        """Send the task back to its agent with the new comments that ask for work
        (`wanted`), and say so on the pull request (`answer`)."""
        link = task.forge
        assert link is not None
        items = [f for f in self.forge.feedback(pull.number) if _num(f.id) > link.seen]
        if not items:
            return
        wanted = self.wanted(task, pull, items)
        task = self.save(task, seen=max(_num(f.id) for f in items))
        if not wanted:
            return
        lines = [f"Review on pull request #{pull.number}:"]
        for f in wanted:
            where = f" ({f.path}:{f.line})" if f.path else ""
            lines.append(f"- {f.author}{where}: {f.body.strip()}")
        self.send_back(task, cut("\n".join(lines), 12_000), rounds=0)
        self.answer(task, pull, wanted)
        out.sent_back.append(task.id)

    def wanted(self, task: Task, pull: PullRequest, items: list[Feedback]) -> list[Feedback]:
        """The comments of ``items`` that ask for work (`asks`) by someone with write
        access; another's is ignored, with an event."""
        me = self.me()
        wanted: list[Feedback] = []
        for f in items:
            if f.author == me or not self.asks(f, items):
                continue
            if self.writer(f.author):
                wanted.append(f)
                continue
            self.board.events.emit(ForgeCommentIgnored(
                pr=pull.number, author=cut(f.author, 100), reason="no write access"),
                task.id, actor=ACTOR)
            self.log.info("comment ignored: its author has no write access", task=task.id,
                          author=cut(f.author, 100), pr=pull.number)
        return wanted

    def answer(self, task: Task, pull: PullRequest, wanted: list[Feedback]) -> None:
        """Say on the pull request that the task went back to its agent: in each inline
        thread a comment asked from (the answer goes where the question was), else once."""
        said = f"orchestrator sent {task.id} back to its agent with {len(wanted)} comment(s) " \
               f"from {', '.join(sorted({f.author for f in wanted}))}; its commits will come " \
               "to this pull request."
        threads = {f.reply_to for f in wanted if f.kind == "inline" and f.reply_to}
        for thread in sorted(threads):
            self.forge.reply(pull.number, thread, said)
        if not threads:
            self.forge.comment(pull.number, said)

    def asks(self, f: Feedback, items: list[Feedback]) -> bool:
        """Whether a comment asks the team for work: a review requesting changes (with its
        inline comments), or a comment naming the team."""
        if f.kind == "changes_requested":
            return True
        words = [COMMAND] + ([self.config.forge.mention] if self.config.forge.mention else [])
        if any(w.lower() in f.body.lower() for w in words):
            return True
        return f.kind == "inline" and any(i.kind == "changes_requested" and i.author == f.author
                                          for i in items)

    def writer(self, login: str) -> bool:
        if login not in self._writers:
            self._writers[login] = self.forge.can_write(login)
        return self._writers[login]

    def me(self) -> str:
        if self._me is None:
            self._me = self.forge.login()
        return self._me

    def send_back(self, task: Task, feedback: str, *, rounds: int) -> None:
        """Back to ``pending`` in the same worktree, with the feedback (as ``retry -m``)."""
        from orchestrator.review.retrying import retry_task

        link = msgspec.structs.replace(task.forge or ForgeLink(), ci_rounds=rounds)
        retry_task(self.layout, self.config, task.id, feedback, actor=ACTOR, board=self.board,
                   also={"forge": link, "wait": None})

    # --- merged there, merged here ---------------------------------------------------------------
    def merged(self, task: Task, pull: PullRequest, out: Outcome) -> Task:
        out.merged.append(task.id)
        return mark_merged(self.layout, self.config, self.board, task, pull).task

    def close(self, task: Task, out: Outcome) -> None:
        link = task.forge
        assert link is not None and link.pr is not None
        self.forge.comment(link.pr, f"{task.id} was {task.status} on the board; closing.")
        self.forge.edit_pull(link.pr, state="closed")
        self.save(task, state="closed")
        self.board.events.emit(PrClosed(pr=link.pr), task.id, actor=ACTOR)
        out.closed.append(task.id)

SETTLE_SECONDS = 2.0
"""``updated_at`` has whole seconds: a change in the same second as a close look would
carry the stamp already seen, so a stamp is remembered only once it is this old."""


def _settled(updated: str) -> str | None:
    """``updated`` when it is old enough to remember (see `SETTLE_SECONDS`), else None."""
    try:
        stamp = datetime.fromisoformat(updated.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    return updated if time.time() - stamp > SETTLE_SECONDS else None


def _to_close(task: Task) -> bool:
    """A discarded or cancelled task whose pull request is still open."""
    return task.status in (Status.DISCARDED, Status.CANCELLED) and task.forge is not None \
        and bool(task.forge.pr) and task.forge.state == "open"


def _unchanged(link: ForgeLink, pull: PullRequest, tip: str, base: str) -> bool:
    """Whether a close look at this pull request can be skipped: nothing pushed here, the
    forge's copy the same (head, base, state, and the settled updated_at last seen), and
    no checks still running."""
    return (link.pushed == tip and pull.head_sha == tip and pull.base == base
            and not pull.merged and pull.state == link.state and link.updated is not None
            and pull.updated == link.updated and link.ci not in ("none", "pending"))


def ci_state(checks: Iterable[Check]) -> CiState:
    states = {c.state for c in checks}
    if "failure" in states:
        return "failure"
    if "pending" in states:
        return "pending"
    return "success" if states else "none"






def _num(feedback_id: str) -> int:
    return int(feedback_id.rsplit("-", 1)[1])




def _title(task: Task) -> str:
    return f"{task.subject} ({task.id})"
