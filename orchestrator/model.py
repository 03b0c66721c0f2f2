"""The task: its fields, its statuses, and the one table of allowed transitions.

A task file (``.tasks/task_001.json``) is this model dumped as JSON. Everything
that is not the task's own data (locks, the id high-water mark) lives elsewhere.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from orchestrator.clock import utcnow as utcnow  # re-exported: callers import it from here
from orchestrator.errors import InvalidInput, InvalidTransition
from orchestrator.record import InvalidRecord as InvalidRecord  # re-exported
from orchestrator.record import Record
from orchestrator.waits import AnyWait, from_text

TASK_ID_RE = re.compile(r"^task_\d{3,}$")
DEFAULT_MAX_ATTEMPTS = 3
MAX_PRIORITY = 10**9
"""Priorities are within ±this (they are a 64-bit integer on the PostgreSQL board)."""
LINE_BREAK = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
"""What ends a line (`str.splitlines`); a subject has none."""


def format_task_id(n: int) -> str:
    """``task_001`` … ``task_999``, then ``task_1000``: widened, never truncated."""
    return f"task_{n:03d}"


def task_number(task_id: str) -> int:
    """The number of a well-formed id (``task_007`` -> 7)."""
    return int(task_id[5:])


def parse_task_id(value: str) -> int:
    """The number of a task id; accepts ``task_007``, ``7`` and ``007`` as people type them."""
    v = value.strip()
    if v.isdigit():
        return int(v)
    if TASK_ID_RE.match(v):
        return int(v.split("_", 1)[1])
    raise InvalidInput(f"not a task id: {value!r} (expected task_NNN)")


def normalize_task_id(value: str) -> str:
    return format_task_id(parse_task_id(value))


class Status(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    REVIEW = "review"
    MERGED = "merged"
    DISCARDED = "discarded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in FINAL

    @property
    def satisfies_blockers(self) -> bool:
        """A dependant may start once its blocker is kept for review or merged."""
        return self in (Status.REVIEW, Status.MERGED)


FINAL = frozenset({Status.MERGED, Status.DISCARDED, Status.CANCELLED})

#: The lifecycle of DESIGN.md, in one place. Every status change goes through `check_transition`.
TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.PENDING: frozenset({Status.IN_PROGRESS, Status.CANCELLED, Status.FAILED}),
    Status.IN_PROGRESS: frozenset(
        {Status.REVIEW, Status.PENDING, Status.FAILED, Status.CANCELLED}
    ),
    Status.REVIEW: frozenset(
        {Status.MERGED, Status.DISCARDED, Status.PENDING, Status.CANCELLED}
    ),
    Status.FAILED: frozenset(
        {Status.PENDING, Status.REVIEW, Status.DISCARDED, Status.CANCELLED}
    ),  # -> review: a task stopped to wait for a person, sent to review as it is (resume)
    Status.MERGED: frozenset(),
    Status.DISCARDED: frozenset(),
    Status.CANCELLED: frozenset(),
}


def check_transition(task_id: str, old: Status, new: Status) -> None:
    if new not in TRANSITIONS[old]:
        allowed = ", ".join(sorted(TRANSITIONS[old])) or "nothing (final)"
        raise InvalidTransition(f"{task_id}: cannot go from {old} to {new} (allowed: {allowed})")


class Lease(Record):
    """Who holds a task, until when, and the fencing token every write must carry."""

    owner: str
    token: int
    expires_at: float
    """Wall-clock epoch seconds; a lease past this is reaped by the lead."""
    acquired_at: str = msgspec.field(default_factory=utcnow)
    renewed_at: str = msgspec.field(default_factory=utcnow)


class Usage(Record):
    """Tokens, dollars and wall-clock seconds an agent spent on a task, summed over attempts."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    """Wall-clock time of the backend's runs."""

    @property
    def tokens(self) -> int:
        """Every token a budget counts: input, output and cache."""
        return self.input_tokens + self.output_tokens + self.cache_read_tokens \
            + self.cache_write_tokens

    def add(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            # to the nano-dollar: sums of binary fractions never show as 1.5000000000000002
            cost_usd=round(self.cost_usd + other.cost_usd, 9),
            seconds=self.seconds + other.seconds,
        )


MAX_BUDGET_USD = 1_000_000.0
MAX_BUDGET_TOKENS = 10**12
MAX_BUDGET_SECONDS = 30 * 86400.0


class Budget(Record):
    """What a task may spend over all its runs (`orchestrator.budget`); None: no limit.
    Each limit is above 0 and at most its MAX_BUDGET_* (so never infinite or NaN)."""

    usd: Annotated[float, Meta(gt=0, le=MAX_BUDGET_USD)] | None = None
    tokens: Annotated[int, Meta(gt=0, le=MAX_BUDGET_TOKENS)] | None = None
    seconds: Annotated[float, Meta(gt=0, le=MAX_BUDGET_SECONDS)] | None = None
    """Wall-clock seconds of the backend's runs (``--timeout``)."""

    def __post_init__(self) -> None:
        if self.usd is None and self.tokens is None and self.seconds is None:
            return
        for name, top in (("usd", MAX_BUDGET_USD), ("tokens", MAX_BUDGET_TOKENS),
                          ("seconds", MAX_BUDGET_SECONDS)):
            v = getattr(self, name)
            if v is not None and not 0 < v <= top:  # also NaN
                raise ValueError(f"budget {name}: must be above 0 and at most {top:g}")


class PushPending(Record):
    """A finished task's branch that the shared remote has not taken yet (it was down,
    read-only, full): the lead of ``machine``, which holds the branch, pushes it again until
    it lands."""

    machine: str
    reason: str


class TodoStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    DONE = "done"


class Todo(Record):
    """One item of the agent's todo list (the ``todo_write`` tool)."""

    content: Annotated[str, Meta(min_length=1, max_length=500)]
    status: TodoStatus = TodoStatus.PENDING


class CheckResult(Record):
    """The verification command's last run on the task (`orchestrator.checks.run_checks`);
    ``stopped``: a stop interrupted it, so it neither passed nor failed."""

    command: str
    passed: bool
    exit_code: int | None = None
    result: str = ""
    seconds: float = 0.0
    output_tail: str = ""
    """The output's last 2,000 characters (``orchestrator logs ID`` has all of it)."""
    at: str = ""
    stopped: bool = False


class ForgeLink(Record, omit_defaults=True):
    """A task's pull request and issue on the team's forge (`orchestrator.forge`); written
    only by orchestrator (a dropped file's ``forge`` key goes to ``metadata``)."""

    pr: int | None = None
    url: str | None = None
    """The pull request's page."""
    pushed: str | None = None
    """The commit last pushed to the pull request's branch."""
    base: str | None = None
    """The branch the pull request targets."""
    ci: str = "none"
    """The pull request's checks on ``pushed``: none, pending, success or failure."""
    ci_rounds: int = 0
    """Times failing CI sent the task back since a person last did (at most checks.retries)."""
    seen: int = 0
    """The highest review or comment id already read."""
    issue: int | None = None
    """The issue the task came from."""
    state: str | None = None
    """open, closed, merged; ``issue_closed`` for a task cancelled by its issue's closing."""
    note: str | None = None
    """The last thing that went wrong with the pull request, for a person."""
    updated: str | None = None
    """The pull request's ``updated_at`` when orchestrator last looked at it closely."""


class Task(Record, omit_defaults=True):
    """One unit of work on the board. The file on disk is the truth (every field written:
    ``omit_defaults`` shortens only its copy in the board's index, see
    `orchestrator.record.full`)."""

    id: str
    subject: Annotated[str, Meta(min_length=1, max_length=500)]
    description: str = ""
    status: Status = Status.PENDING
    priority: Annotated[int, Meta(ge=-MAX_PRIORITY, le=MAX_PRIORITY)] = 0
    """Higher runs first; ties go to the lower id."""
    blocked_by: list[str] = msgspec.field(default_factory=list)
    backend: str | None = None
    """Overrides the team's backend for this task (e.g. ``command``, ``anthropic``)."""
    agent: str | None = None
    """Agent profile name (``.claude/agents/<name>.md``)."""
    max_attempts: Annotated[int, Meta(ge=1)] = DEFAULT_MAX_ATTEMPTS
    attempts: int = 0
    """Runs that ended badly (failed or lease expired); at ``max_attempts`` the task is failed.
    A warm release (the teammate was asked to stop) does not count."""

    owner: str | None = None
    lease: Lease | None = None
    fence: int = 0
    """The highest lease token ever issued for this task; the next claim gets fence + 1."""
    wait: AnyWait | None = None
    """What the task waits for from a person (`orchestrator.waits`), or None."""
    waiting_for: str | None = None
    """What old task files held instead of ``wait`` (a request id or a paused run's
    reason): read into ``wait`` on every load and copy, so it is always None here."""

    worktree: str | None = None
    branch: str | None = None
    base: str | None = None
    base_commit: str | None = None

    error: str | None = None
    pushed: dict[str, str] = msgspec.field(default_factory=dict)
    """Across machines: the commit the shared remote holds for this task's ``wip`` snapshot
    and ``branch``, recorded (fenced) by the lease that pushed it. The next push expects
    exactly that on the remote, so a push of a lease that is gone is refused there."""
    push_pending: PushPending | None = None
    """Across machines: the branch of this finished task is not on the remote yet."""
    feedback: list[str] = msgspec.field(default_factory=list)
    checks: CheckResult | None = None
    usage: Usage = msgspec.field(default_factory=Usage)
    budget: Budget = msgspec.field(default_factory=Budget)
    """Limits on ``usage`` (``add --budget-usd/--budget-tokens/--timeout``)."""
    session_id: str | None = None
    """A backend's conversation id, so a retried task can resume it."""
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    """Anything else the user put in the dropped file, kept verbatim."""
    source: str | None = None
    """The dropped file this task came from (``inbox/fix-login.md``), when intake made it."""
    expect_changes: bool = True
    """False for a task whose run may rightly change nothing (an investigation, a check);
    otherwise a run that leaves no change fails with that reason."""
    plan_first: bool = False
    """Run in ``plan`` mode (read-only tools) until the lead approves the agent's plan."""
    plan: str | None = None
    """The plan the lead approved (plan-first tasks); later runs keep normal permissions."""
    todos: list[Todo] = msgspec.field(default_factory=list)
    """The agent's todo list (``todo_write``), shown by ``show`` and ``board``."""
    forge: ForgeLink | None = None
    """Its pull request on the team's forge (``[forge]``), once it has one."""

    created_at: str = msgspec.field(default_factory=utcnow)
    updated_at: str = msgspec.field(default_factory=utcnow)

    def __post_init__(self) -> None:
        """What the types cannot say; runs on decoding, construction and copies."""
        # Without regular expressions where a str method answers: every task of a board's
        # index passes through here (a tenth of a second at 50,000 tasks with them).
        tid = self.id
        if not (isinstance(tid, str) and tid.startswith("task_") and len(tid) >= 8
                and tid[5:].isdecimal()):  # TASK_ID_RE, without its `$` before a newline
            raise ValueError(f"id: not a task id: {tid!r} (expected task_NNN)")
        s = self.subject
        if not isinstance(s, str) or not 1 <= len(s) <= 500:
            raise ValueError("subject: 1 to 500 characters")
        if not s.isprintable() and LINE_BREAK.search(s):  # every line break is unprintable
            raise ValueError("subject: the subject is one line (put details in the description)")
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError("max_attempts: at least 1")
        if self.waiting_for is not None:  # an old file, or a writer not moved to `wait`
            self.wait = from_text(self.waiting_for) if self.waiting_for else None
            self.waiting_for = None
        if self.blocked_by:
            try:
                self.blocked_by = [normalize_task_id(x) for x in self.blocked_by]
            except InvalidInput as exc:
                raise ValueError(f"blocked_by: {exc}") from None

    @property
    def slug(self) -> str:
        """A short, name-safe form of the subject for branch names."""
        s = re.sub(r"[^a-z0-9]+", "-", self.subject.lower()).strip("-")
        return s[:40].rstrip("-") or "task"

    def lease_live(self, now: float) -> bool:
        return self.lease is not None and self.lease.expires_at > now


def column_of(task: Task) -> str | None:
    """The column a task shows in on the board views (``board --watch``, the web board);
    None for discarded and cancelled tasks."""
    if task.status is Status.IN_PROGRESS:
        return "waiting for input" if task.wait else "in progress"
    if task.status is Status.FAILED and task.wait:
        return "waiting for input"  # stopped for a budget, no progress, checks exhausted
    return {Status.PENDING: "pending", Status.REVIEW: "review", Status.MERGED: "merged",
            Status.FAILED: "failed"}.get(task.status)


LAND_FEEDBACK = "land:"
"""How the feedback of a task that ``orchestrator land`` sent back starts (its verify or
merge failed on top of what landed); the lead does not land such a task again by itself."""
