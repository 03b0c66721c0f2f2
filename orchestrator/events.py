"""Every kind of audit event, as a typed struct, and what an event means for its task.

A producer builds the kind and hands it to the log with the task and the actor::

    board.events.emit(TaskClaimed(owner="alice", token=3, attempt=1), task.id, actor="alice")

so mypy checks its fields. The log (`orchestrator.controlplane.Events`, reached through
``board.events``; the file implementation is `orchestrator.board.eventlog`) keeps five
columns, ``seq``, ``ts``, ``event`` (the kind's tag), ``task`` and ``actor``, and the
kind's fields beside them in the same JSON object: ``events.jsonl`` reads as it always
did. `Event.decode` turns a line read back into its kind; a kind this code does not
know, or a hand-edited line that does not fit its kind, decodes to None (the log is
hostile input). A field marked ``UNSET`` is absent from the line when not given.

``docs/events.md`` lists the kinds from this module (``scripts/gen_event_docs.py``). Values
that look like the secrets in this process's environment are masked before anything is
written (`orchestrator.secrets`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, get_args

import msgspec
from msgspec import UNSET as UNSET  # re-exported: producers leave a field out with it
from msgspec import UnsetType as UnsetType

from orchestrator.model import Budget, Usage
from orchestrator.secrets import MASK as MASK  # re-exported: callers import them from here
from orchestrator.secrets import SECRET_NAME_RE as SECRET_NAME_RE
from orchestrator.secrets import redact as redact
from orchestrator.secrets import secret_values as secret_values

if TYPE_CHECKING:
    from orchestrator.controlplane import Event, Events


class EventKind(msgspec.Struct, frozen=True, kw_only=True, tag_field="event"):
    """What every event kind shares: the status it gives its task (None: it sets none)."""

    SETS: ClassVar[str | None] = None

    def sets(self) -> str | None:
        """The status this event gave its task, or None for an event that sets none."""
        return self.SETS


# --- tasks on the board ----------------------------------------------------------------
class TaskCreated(EventKind, frozen=True, tag="task_created"):
    """A new pending task (``source``: the dropped file it came from)."""

    SETS = "pending"
    subject: str
    source: str | UnsetType = UNSET


class TaskCreateFailed(EventKind, frozen=True, tag="task_create_failed"):
    """Its ``task_created`` was logged but the task file could not be written."""

    error: str


class TaskRejected(EventKind, frozen=True, tag="task_rejected"):
    """A dropped file that is not a task, moved aside with the reason (no task)."""

    file: str
    moved_to: str
    reason: str


class TaskEdited(EventKind, frozen=True, tag="task_edited"):
    """Fields of a task changed by a person or the lead."""

    fields: list[str]


class TaskStatusSet(EventKind, frozen=True, tag="task_status"):
    """A task moved from one status to another by hand (``recovered``: the lead logged
    the last board write of a teammate that died before logging it)."""

    from_: str = msgspec.field(name="from")
    to: str
    recovered: bool | UnsetType = UNSET
    token: int | UnsetType | None = UNSET
    error: str | UnsetType | None = UNSET

    def sets(self) -> str | None:
        """its `to`"""
        return self.to


class TaskCancelled(EventKind, frozen=True, tag="task_cancelled"):
    """A person cancelled the task (``previous``: its status before)."""

    SETS = "cancelled"
    previous: str


class TaskClaimed(EventKind, frozen=True, tag="task_claimed"):
    """A teammate took the task with lease ``token`` for its ``attempt``-th run."""

    SETS = "in_progress"
    owner: str
    token: int
    attempt: int


class TaskCompleted(EventKind, frozen=True, tag="task_completed"):
    """The run finished: the task waits for review."""

    SETS = "review"
    token: int | None
    recovered: bool | UnsetType = UNSET


class TaskFailed(EventKind, frozen=True, tag="task_failed"):
    """The run failed; ``status`` is ``pending`` while attempts remain, else ``failed``."""

    token: int
    error: str
    attempts: int
    status: str

    def sets(self) -> str | None:
        """its `status`"""
        return self.status


class TaskReleased(EventKind, frozen=True, tag="task_released"):
    """The teammate gave the task back without an attempt counting."""

    SETS = "pending"
    token: int
    reason: str


class _Requeue(EventKind, frozen=True):
    owner: str | None
    token: int | None
    reason: str
    attempts: int
    status: str

    def sets(self) -> str | None:
        """its `status` (`pending`, or `failed` after the last attempt)"""
        return self.status


class LeaseExpired(_Requeue, frozen=True, tag="lease_expired"):
    """The lead took back a task whose lease ran out."""


class TaskRequeued(_Requeue, frozen=True, tag="task_requeued"):
    """The lead took back the tasks of a teammate that died."""


class TaskAbandoned(EventKind, frozen=True, tag="task_abandoned"):
    """The teammate stopped working on the task (cancelled, or its lease was lost)."""

    token: int
    reason: str


class TaskRetried(EventKind, frozen=True, tag="task_retried"):
    """A person sent the task back with feedback."""

    SETS = "pending"
    feedback: str | None
    branch: str | None


class TaskResumed(EventKind, frozen=True, tag="task_resumed"):
    """A task that waited for a person goes on (``budget``: the raised budget)."""

    to: str
    budget: Budget
    feedback: str | None


# --- a teammate's run ----------------------------------------------------------------
class Committed(EventKind, frozen=True, tag="commit"):
    """The run's work committed to the task branch (``wip``: work in progress of a pause)."""

    sha: str
    branch: str | None
    wip: bool | UnsetType = UNSET


class _Checks(EventKind, frozen=True):
    command: str
    result: str


class ChecksPassed(_Checks, frozen=True, tag="checks_passed"):
    """The verify command passed in the task's worktree."""


class ChecksFailed(_Checks, frozen=True, tag="checks_failed"):
    """The verify command failed in the task's worktree."""


class WorktreeSetAside(EventKind, frozen=True, tag="worktree_set_aside"):
    """Leftover changes of an earlier run saved on a branch before a new run starts."""

    sha: str


class Spend(EventKind, frozen=True, tag="spend"):
    """What a run spent (``usage``: tokens, cost, time; ``plan``: the plan it belongs to)."""

    usage: Usage
    plan: str | None


class BudgetWarning(EventKind, frozen=True, tag="budget_warning"):
    """Spending passed 80 % of a limit (``limit``: ``task``, ``plan``, ``daily`` …)."""

    limit: str
    spent: str


class _Paused(EventKind, frozen=True):
    reason: str
    wip: str | None
    spent: str


class BudgetReached(_Paused, frozen=True, tag="budget_reached"):
    """The run stopped at a budget; the task waits for a person (``wip``: the commit)."""


class NoProgress(_Paused, frozen=True, tag="no_progress"):
    """The run stopped making progress; the task waits for a person."""


class ToolCalled(EventKind, frozen=True, tag="tool_called"):
    """The agent called a tool (``decision``: how its permission was settled)."""

    tool: str
    subject: str | None
    decision: str | UnsetType = UNSET
    is_error: bool | UnsetType = UNSET
    rule: str | UnsetType = UNSET
    backend: str | UnsetType = UNSET


class FileModified(EventKind, frozen=True, tag="file_modified"):
    """A tool changed a file (``path``: relative to the worktree where it is inside)."""

    tool: str
    path: str


class PermissionDenied(EventKind, frozen=True, tag="permission_denied"):
    """A deny rule refused a tool call without asking."""

    tool: str
    subject: str | None
    rule: str | None
    backend: str


class PermissionRequested(EventKind, frozen=True, tag="permission_requested"):
    """The agent asks the lead to allow a tool call; the task waits."""

    request_id: str
    tool: str
    subject: str | None


class PlanSubmitted(EventKind, frozen=True, tag="plan_submitted"):
    """The agent asks the lead to approve its plan; the task waits."""

    request_id: str
    plan: str


class _Answered(EventKind, frozen=True):
    request_id: str
    approved: bool
    message: str | None
    tool: str | None


class PermissionAnswered(_Answered, frozen=True, tag="permission_answered"):
    """A person answered a permission request."""


class PlanAnswered(_Answered, frozen=True, tag="plan_answered"):
    """A person answered a plan."""


class McpServerFailed(EventKind, frozen=True, tag="mcp_server_failed"):
    """An MCP server of the task's run did not connect."""

    server: str
    error: str | None


# --- worktrees ----------------------------------------------------------------------
class SharedFolderLink(msgspec.Struct, frozen=True, kw_only=True):
    """What one shared folder became in a new worktree (`orchestrator.worktree.shared`)."""

    folder: str
    how: str
    """``hardlink``, ``symlink``, ``copy`` or ``skipped``."""
    key: str | UnsetType = UNSET
    """The cache entry's key (from the folder's key files)."""
    source: str | UnsetType = UNSET
    """Where the cache entry came from: ``cache``, ``command`` or ``main``."""
    reason: str | UnsetType = UNSET
    """Why it was skipped."""


class WorktreeCreated(EventKind, frozen=True, kw_only=True, tag="worktree_created"):
    """The task's workspace is ready (``shared``: what each shared folder became)."""

    path: str
    branch: str | None
    base: str | UnsetType | None = UNSET
    base_commit: str | UnsetType | None = UNSET
    isolation: str | UnsetType = UNSET
    reused: bool
    port_base: int
    note: str | UnsetType = UNSET
    shared: list[SharedFolderLink] | UnsetType = UNSET


class WorktreeKept(EventKind, frozen=True, tag="worktree_kept"):
    """The task went to review; its workspace stays (a plain folder is snapshotted)."""

    path: str
    branch: str | None
    snapshot: str | UnsetType = UNSET
    digest: str | UnsetType = UNSET


class WorktreeRemoved(EventKind, frozen=True, kw_only=True, tag="worktree_removed"):
    """The task's workspace was removed (``snapshot``: where its state was saved)."""

    path: str
    branch: str | None
    isolation: str | UnsetType = UNSET
    snapshot: str | None
    forced: bool
    kept_ignored: str | UnsetType = UNSET


class Orphan(msgspec.Struct, frozen=True, kw_only=True):
    """A worktree or folder in the worktree root that no task owns: reported, never
    touched (``branch`` empty: none, or not a git worktree)."""

    path: str
    branch: str
    reason: str


class WorktreesReconciled(EventKind, frozen=True, tag="worktrees_reconciled"):
    """Start-up repaired or reported workspaces (only the non-empty lists are written)."""

    isolation: str | UnsetType = UNSET
    pruned: list[str] | UnsetType = UNSET
    cleared: list[str] | UnsetType = UNSET
    recreated: list[str] | UnsetType = UNSET
    orphans: list[Orphan] | UnsetType = UNSET
    problems: dict[str, str] | UnsetType = UNSET
    """Task id -> why its worktree could not be restored."""


class WorktreeEntered(EventKind, frozen=True, tag="worktree_entered"):
    """A person opened a shell (or ran ``command``) in the task's worktree."""

    path: str
    command: list[str] | None


# --- review and landing --------------------------------------------------------------
class Merged(EventKind, frozen=True, tag="merged"):
    """The task's branch was merged into ``into`` (``pr``: through a pull request)."""

    SETS = "merged"
    strategy: str
    into: str
    commit: str
    branch: str | None
    tip: str | None
    pr: int | UnsetType = UNSET


class Discarded(EventKind, frozen=True, tag="discarded"):
    """The task's work was thrown away (``snapshot``: where it was saved)."""

    SETS = "discarded"
    branch: str | None
    snapshot: str | None
    forced: bool


class LandStarted(EventKind, frozen=True, tag="land_started"):
    """``orchestrator land`` began on ``tasks``."""

    tasks: list[str]
    verify: str
    batch: int


class LandFinished(EventKind, frozen=True, tag="land_finished"):
    """``orchestrator land`` ended (``verifications``: how often the verify command ran)."""

    landed: list[str]
    rejected: list[str]
    seconds: float
    verifications: int


class LandRestacked(EventKind, frozen=True, tag="land_restacked"):
    """The task was rebased onto its blockers' landed work."""

    blockers: list[str]
    old_tip: str
    new_tip: str


class LandVerified(EventKind, frozen=True, tag="land_verified"):
    """The verify command passed on the merge result (``together``: a batch's tasks)."""

    commit: str
    command: str
    seconds: float
    together: list[str] | None


class LandingRejected(EventKind, frozen=True, kw_only=True, tag="land_rejected"):
    """The task could not land (``retried``: sent back to a teammate with the reason)."""

    reason: str
    output: str | UnsetType = UNSET
    retried: bool


class LandNote(EventKind, frozen=True, tag="land_note"):
    """The task landed with a note (its worktree or its gitignored files were kept)."""

    note: str


class LandSkipped(EventKind, frozen=True, tag="land_skipped"):
    """The task was not landed this time (the target kept moving, a blocker did not
    land, …)."""

    reason: str


class TaskMerged(EventKind, frozen=True, tag="task_merged"):
    """``orchestrator land`` merged the task after its checks passed."""

    into: str
    commit: str
    branch: str | None
    verify_seconds: float


class BranchPushed(EventKind, frozen=True, tag="branch_pushed"):
    """A push the remote refused earlier went through (``after``: why it was pending)."""

    branch: str | None
    sha: str
    after: str


# --- the forge ---------------------------------------------------------------------
class PrOpened(EventKind, frozen=True, tag="pr_opened"):
    """A pull request was opened for the task's branch against ``base``."""

    pr: int
    url: str
    base: str


class PrUpdated(EventKind, frozen=True, tag="pr_updated"):
    """New commits (``commit``: the tip) or a new base were pushed to the pull request."""

    pr: int
    commit: str
    base: str


class PrChecks(EventKind, frozen=True, tag="pr_checks"):
    """The pull request's CI settled (``checks``: each check's conclusion)."""

    pr: int
    state: str
    checks: dict[str, str | None]


class PrReady(EventKind, frozen=True, tag="pr_ready"):
    """The draft pull request's checks passed: it was marked ready for review."""

    pr: int


class PrClosed(EventKind, frozen=True, tag="pr_closed"):
    """The task's pull request was closed (the task ended without it)."""

    pr: int


class Waiting(EventKind, frozen=True, tag="waiting"):
    """The task waits for a person (CI failed again on its pull request)."""

    reason: str
    pr: int


class ForgeCommentIgnored(EventKind, frozen=True, tag="forge_comment_ignored"):
    """A review or comment was ignored: its ``author`` has no write access."""

    pr: int
    author: str
    reason: str


class ForgeProblem(EventKind, frozen=True, tag="forge_problem"):
    """Syncing this task with the forge failed (one line with the reason); the next sync
    tries again."""

    problem: str


class ForgeBackoff(EventKind, frozen=True, tag="forge_backoff"):
    """The forge failed; the watcher waits longer before the next sync."""

    problem: str


class ForgeWebhook(EventKind, frozen=True, tag="forge_webhook"):
    """A verified webhook delivery arrived (``hook``: its event name)."""

    hook: str


class IssueTaken(EventKind, frozen=True, tag="issue_taken"):
    """A forge issue became the task."""

    issue: int


class IssueClosed(EventKind, frozen=True, tag="issue_closed"):
    """The task's issue was closed on the forge (its ``task_cancelled`` comes first)."""

    issue: int


# --- the lead ------------------------------------------------------------------------
class TeammateStarted(EventKind, frozen=True, tag="teammate_started"):
    """The lead started a teammate process."""

    teammate: str
    pid: int


class TeammateStopped(EventKind, frozen=True, tag="teammate_stopped"):
    """A teammate process ended (``requeued``: its tasks sent back at once)."""

    teammate: str
    pid: int
    exit_code: int
    requeued: list[str]


class PlanWritten(EventKind, frozen=True, tag="plan_written"):
    """``orchestrator plan`` added ``tasks`` for ``goal``."""

    plan: str
    goal: str
    tasks: list[str]


class SettingChange(msgspec.Struct, frozen=True, kw_only=True):
    """One changed setting: its value before and after, and whether it applies at once
    (``live``) or after a restart."""

    key: str
    old: Any
    new: Any
    live: bool


class ConfigChanged(EventKind, frozen=True, tag="config_changed"):
    """The lead applied changed settings."""

    changes: list[SettingChange]


class ConfigRejected(EventKind, frozen=True, tag="config_rejected"):
    """A changed settings file is invalid; the last good settings stay."""

    error: str


class HookFailed(EventKind, frozen=True, tag="hook_failed"):
    """An event hook command failed."""

    hook: str
    command: str
    error: str
    output: str


AnyEvent = (
    TaskCreated | TaskCreateFailed | TaskRejected | TaskEdited | TaskStatusSet
    | TaskCancelled | TaskClaimed | TaskCompleted | TaskFailed | TaskReleased | LeaseExpired
    | TaskRequeued | TaskAbandoned | TaskRetried | TaskResumed | Committed | ChecksPassed
    | ChecksFailed | WorktreeSetAside | Spend | BudgetWarning | BudgetReached | NoProgress
    | ToolCalled | FileModified | PermissionDenied | PermissionRequested | PlanSubmitted
    | PermissionAnswered | PlanAnswered | McpServerFailed | WorktreeCreated | WorktreeKept
    | WorktreeRemoved | WorktreesReconciled | WorktreeEntered | Merged | Discarded
    | LandStarted | LandFinished | LandRestacked | LandVerified | LandingRejected | LandNote
    | LandSkipped | TaskMerged | BranchPushed | PrOpened | PrUpdated | PrChecks | PrReady
    | PrClosed | Waiting | ForgeCommentIgnored | ForgeProblem | ForgeBackoff | ForgeWebhook
    | IssueTaken | IssueClosed | TeammateStarted | TeammateStopped | PlanWritten
    | ConfigChanged | ConfigRejected | HookFailed
)
"""Every kind this code writes, tagged by ``event``."""

KINDS: tuple[type[EventKind], ...] = get_args(AnyEvent)
"""The kinds in the order the docs list them."""


def names(*kinds: type[EventKind]) -> frozenset[str]:
    """The names the log gives ``kinds`` (to match `Event.event` without decoding)."""
    return frozenset(str(k.__struct_config__.tag) for k in kinds)


EVENT_TYPES = names(*KINDS)
"""The name of every kind."""
HOOK_EVENTS = EVENT_TYPES - names(HookFailed)
"""The event types a hook in ``[hooks] events`` may run on: all but a hook's own failure
(a failing hook would run itself again)."""


def fields_of(kind: EventKind) -> tuple[str, dict[str, Any]]:
    """The event name and the fields written beside the columns. A value of the wrong
    type (one mypy could not see: read from a dict, a subprocess, the forge) raises
    `TypeError` here rather than writing a line its readers cannot decode."""
    if not isinstance(kind, EventKind):  # a caller mypy does not check (a test, a script)
        raise TypeError(f"emit takes an event kind of orchestrator.events, not {kind!r}")
    fields = msgspec.to_builtins(kind)
    try:
        msgspec.convert(fields, type(kind))
    except msgspec.ValidationError as exc:
        raise TypeError(f"event {fields['event']}: {exc}") from None
    return fields.pop("event"), fields


def decode(name: str, fields: dict[str, Any]) -> AnyEvent | None:
    """The kind of an event read back, or None: a kind this code does not know, or
    fields that do not fit it (extra fields are ignored)."""
    try:
        kind: AnyEvent = msgspec.convert({**fields, "event": name}, AnyEvent)
        return kind
    except msgspec.ValidationError:
        return None


def event_status(e: Event) -> str | None:
    """The status an event gave its task, or None for an event that sets none."""
    kind = e.decode()
    return None if kind is None else kind.sets()


def last_status_event(events: Events, task: str) -> Event | None:
    """The newest event that gave ``task`` a status (see `event_status`)."""
    found = None
    for e in events.read(task=task):
        if event_status(e) is not None:
            found = e
    return found
