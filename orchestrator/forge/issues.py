"""Issues in as tasks (`issues_in`, a step of each `ForgeSync` pass).

An open issue with ``[forge] issue_label`` written by someone with write access becomes a
task: its title a one-line subject (control and format characters become spaces, 200
characters), its body the description, those of its labels that are label names
(`orchestrator.adding.LABEL_RE`) its labels, and ``blocked by #N`` a blocker when issue N
has a task. It is added by `orchestrator.adding.add_task`, as from every face. The task
records the issue (``Task.forge.issue``), so its pull request says "Closes #N". Closing
the issue cancels the task while it has not started; reopening it after that makes a new
task. Anyone can open an issue, and an issue template can add a label: an issue by
someone without write access is ignored (one log line per issue).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from orchestrator.adding import MAX_LABELS, add_task, label_names
from orchestrator.errors import InvalidTransition
from orchestrator.events import IssueClosed, IssueTaken
from orchestrator.forge import Issue, cut
from orchestrator.model import ForgeLink, Status, Task

if TYPE_CHECKING:
    from orchestrator.forge.sync import ForgeSync, Outcome

ACTOR = "forge"
BLOCKED_BY_RE = re.compile(r"\bblocked[ -]by:?\s+((?:#\d{1,9}[\s,and]*)+)", re.I)
MAX_SUBJECT = 200


def issues_in(sync: ForgeSync, label: str, out: Outcome) -> None:
    board = sync.board
    latest: dict[int, Task] = {}
    for t in sorted((t for t in board.list() if t.forge and t.forge.issue),
                    key=lambda t: t.created_at):
        assert t.forge is not None and t.forge.issue is not None
        latest[t.forge.issue] = t
    for issue in sync.forge.issues(label):
        task = latest.get(issue.number)
        if issue.state == "open" and (task is None or (task.forge is not None
                                                       and task.forge.state == "issue_closed")):
            made = task_from(sync, issue, latest)
            if made is not None:
                latest[issue.number] = made
                out.created.append(made.id)
        elif issue.state == "closed" and task is not None and not_started(task):
            try:
                board.cancel(task.id, actor=ACTOR)
            except InvalidTransition:
                continue
            sync.save(board.get(task.id), state="issue_closed")
            board.events.emit(IssueClosed(issue=issue.number), task.id, actor=ACTOR)
            out.cancelled.append(task.id)


def task_from(sync: ForgeSync, issue: Issue, latest: dict[int, Task]) -> Task | None:
    if not sync.writer(issue.author):
        if issue.number not in sync.ignored_issues:
            sync.ignored_issues.add(issue.number)
            sync.log.info("issue ignored: its author has no write access", issue=issue.number,
                          author=cut(issue.author, 100))
        return None
    blockers = [latest[n].id for n in blocked_by(issue.body) if n in latest]
    subject = one_line(issue.title) or f"Issue #{issue.number}"
    task = add_task(
        sync.layout, sync.config, sync.board, subject[:MAX_SUBJECT],
        description=f"{issue.body}\n\n(From issue #{issue.number}: {issue.url})",
        blocked_by=blockers, labels=label_names(issue.labels)[:MAX_LABELS],
        metadata={"issue_url": issue.url}, forge=ForgeLink(issue=issue.number), actor=ACTOR)
    sync.board.events.emit(IssueTaken(issue=issue.number), task.id, actor=ACTOR)
    return task


def not_started(task: Task) -> bool:
    return task.status is Status.PENDING and task.branch is None


def blocked_by(body: str) -> list[int]:
    """Issue numbers a body says it is blocked by (``blocked by #12``, ``Blocked by: #3, #4``)."""
    out: list[int] = []
    for m in BLOCKED_BY_RE.finditer(body[:20_000]):
        out += [int(n) for n in re.findall(r"#(\d+)", m.group(1))]
    return out


def one_line(text: str) -> str:
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
