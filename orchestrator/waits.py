"""What a task waits for: one typed model, and the actions that answer each kind.

A task that needs a person carries one `Wait` (``Task.wait``), a tagged union:

    kind               set by                                   answered by
    permission         the permission gate (a tool call: ask)   approve | deny
    plan               a plan-first task's submit_plan          approve | deny
    budget             a run reached a budget (which limit)     resume --budget-usd N |
                                                                resume --review | discard
    no_progress        a run made no progress (which reason)    resume -m MSG |
                                                                resume --review | discard
    checks_exhausted   checks failed every round                retry -m MSG | discard
    land_rejected      ``land`` rejected it past its retries    retry -m MSG | merge | discard
    merge_conflict     a merge would conflict                   retry -m MSG | discard
    push_rejected      the remote refused the push of a merge   land | retry -m MSG
    ci_exhausted       the forge's CI failed every round        retry -m MSG | discard

Every face renders a wait from here: its short ``label`` (a card, a ``list`` cell), its
``text`` (one line, ``show``/``status``), its ``actions`` (buttons on the task page,
commands on the CLI, MCP's ``wait`` field, the hooks' payload). None spells its own.

``permission`` and ``plan`` belong to the run that asked (`Wait.of_run`): the run's end
clears them, and their request expires with it. The others stay until a person acts.

Old task files hold ``waiting_for``, a string (a request id, or a paused run's reason
such as ``budget: $2.00 of $2.00 spent``); `from_text` reads it into a `Wait`, and
``Task`` does so on every load, so nothing else reads that string.
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, NamedTuple

import msgspec
from msgspec import Meta

from orchestrator.clock import utcnow
from orchestrator.record import Record

TEXT = Annotated[str, Meta(max_length=2000)]


class Action(NamedTuple):
    """One way a person answers a wait.

    ``name`` is what the web board posts and tests check; ``command`` the CLI line (with
    ``{id}`` for the task or request); ``field`` the input the page asks for with it
    (``budget_usd``, ``message``), or None."""

    name: str
    label: str
    command: str
    field: str | None = None

    def line(self, ident: str) -> str:
        return self.command.format(id=ident)


APPROVE = Action("approve", "Approve", "orchestrator approve {id}", "message")
DENY = Action("deny", "Deny", "orchestrator deny {id} -m WHY", "message")
RAISE = Action("resume", "Raise the limit and resume",
               "orchestrator resume {id} --budget-usd N", "budget_usd")
RESUME_MESSAGE = Action("resume", "Resume with a message", "orchestrator resume {id} -m MSG",
                        "message")
TO_REVIEW = Action("resume_review", "Send to review as it is",
                   "orchestrator resume {id} --review")
RETRY = Action("retry", "Retry with feedback", "orchestrator retry {id} -m MSG", "message")
MERGE = Action("merge", "Merge anyway", "orchestrator merge {id}")
LAND = Action("land", "Land again", "orchestrator land {id}")
DISCARD = Action("discard", "Discard", "orchestrator discard {id}")


class Wait(Record, tag_field="kind", kw_only=True):
    """What a task waits for; one subclass per kind (see the module's table)."""

    since: str = msgspec.field(default_factory=utcnow)
    label: ClassVar[str] = ""
    """A few words for a card or a table cell."""
    actions: ClassVar[tuple[Action, ...]] = ()
    of_run: ClassVar[bool] = False
    """The wait belongs to the run that asked: its end clears it."""
    paused: ClassVar[bool] = False
    """The run was stopped for it: ``resume`` answers it (and so does ``retry``)."""

    template: ClassVar[str] = ""
    """Its ``text``, formatted with its fields."""

    @property
    def kind(self) -> str:
        """Its tag: ``permission``, ``budget``, … (what its JSON's ``kind`` says)."""
        return str(self.__struct_config__.tag)

    @property
    def text(self) -> str:
        """One line: what it waits for and why."""
        fields = msgspec.structs.asdict(self)
        return self.template.format_map({k: ", ".join(v) if isinstance(v, list) else v
                                         for k, v in fields.items()})

    @property
    def ident(self) -> str | None:
        """The request id its actions name instead of the task's (permission, plan)."""
        return getattr(self, "request_id", None)

    def commands(self, task_id: str) -> list[str]:
        """The CLI lines that answer it."""
        return list(dict.fromkeys(a.line(self.ident or task_id) for a in self.actions))


class Permission(Wait, tag="permission", kw_only=True):
    request_id: TEXT
    tool: TEXT = ""
    subject: TEXT = ""
    label: ClassVar[str] = "permission"
    actions = (APPROVE, DENY)
    of_run = True

    @property
    def text(self) -> str:
        what = f"{self.tool}({self.subject})" if self.tool else self.request_id
        return f"permission to run {what}"


class Plan(Wait, tag="plan", kw_only=True):
    request_id: TEXT
    label: ClassVar[str] = "plan approval"
    actions = (APPROVE, DENY)
    of_run = True
    template = "approval of its plan ({request_id})"


class BudgetReached(Wait, tag="budget", kw_only=True):
    reason: TEXT
    """``budget: $2.00 of $2.00 spent``, as `orchestrator.budget.reached` words it."""
    limit: TEXT = "task"
    """Which budget: ``task``, ``plan <id>``, ``<teammate> today``, ``board today``."""
    label: ClassVar[str] = "budget"
    actions = (RAISE, TO_REVIEW, DISCARD)
    paused = True

    @property
    def text(self) -> str:
        return f"budget reached: {self.reason.removeprefix('budget:').strip()}"


class NoProgress(Wait, tag="no_progress", kw_only=True):
    reason: TEXT
    """``no progress: …``, as `orchestrator.agent.progress` words it."""
    label: ClassVar[str] = "no progress"
    actions = (RESUME_MESSAGE, TO_REVIEW, DISCARD)
    paused = True
    template = "{reason}"


class ChecksExhausted(Wait, tag="checks_exhausted", kw_only=True):
    result: TEXT = ""
    rounds: int = 0
    label: ClassVar[str] = "checks failed"
    actions = (RETRY, DISCARD)
    template = "checks failed {rounds} times ({result})"


class LandRejected(Wait, tag="land_rejected", kw_only=True):
    reason: TEXT
    label: ClassVar[str] = "land rejected"
    actions = (RETRY, MERGE, DISCARD)
    template = "land rejected: {reason}"


class MergeConflict(Wait, tag="merge_conflict", kw_only=True):
    into: TEXT
    files: Annotated[list[TEXT], Meta(max_length=100)] = msgspec.field(default_factory=list)
    label: ClassVar[str] = "merge conflict"
    actions = (RETRY, DISCARD)
    template = "would conflict with {into} in {files}"


class PushRejected(Wait, tag="push_rejected", kw_only=True):
    reason: TEXT
    remote: TEXT = "the remote"
    label: ClassVar[str] = "push rejected"
    actions = (LAND, RETRY)
    template = "push rejected by {remote}: {reason}"


class CiExhausted(Wait, tag="ci_exhausted", kw_only=True):
    """The forge's CI failed on the task's pull request every round it was given."""

    reason: TEXT
    url: TEXT = "the pull request"
    label: ClassVar[str] = "CI failed"
    actions = (RETRY, DISCARD)
    template = "CI failed on {url}: {reason}"


AnyWait = (Permission | Plan | BudgetReached | NoProgress | ChecksExhausted | LandRejected
           | MergeConflict | PushRejected | CiExhausted)
"""The field's type (``Task.wait``): msgspec decodes the kind its tag names."""

KINDS: dict[str, type[Wait]] = {
    str(c.__struct_config__.tag): c for c in (
        Permission, Plan, BudgetReached, NoProgress, ChecksExhausted, LandRejected,
        MergeConflict, PushRejected, CiExhausted)}


def paused(reason: str) -> BudgetReached | NoProgress:
    """The wait of a run stopped for a person, from its reason (`orchestrator.budget`'s
    ``budget: …``, with the limit's label after ``budget:``; `NoProgress`'s
    ``no progress: …``)."""
    if reason.startswith("budget:"):
        return BudgetReached(reason=reason[:2000], limit=_limit(reason))
    return NoProgress(reason=reason[:2000])


def _limit(reason: str) -> str:
    """``budget: board today $50.00 of $50.00 spent`` -> ``board today``; ``task`` when
    the reason names no limit."""
    m = _REACHED.match(reason)
    return (m.group(1) if m else "") or "task"


_REACHED = re.compile(r"budget: (?:(.+?) )?\S+ of \S+ (?:tokens )?spent$")


def from_text(text: str) -> AnyWait:
    """A ``waiting_for`` string of an old task file (or of a writer not yet moved to
    ``wait``): a paused run's reason, a ``push rejected:`` reason, a ``plan-…`` request
    id, else a permission request id."""
    if text.startswith(("budget:", "no progress:")):
        return paused(text)
    if text.startswith("ci_exhausted"):
        return CiExhausted(reason=text.partition(":")[2].strip()[:2000] or text[:2000])
    if text.startswith("push rejected"):
        return PushRejected(reason=text.partition(":")[2].strip()[:2000] or text[:2000])
    if text.startswith("plan-"):
        return Plan(request_id=text[:2000])
    return Permission(request_id=text[:2000])


def text_of(value: object) -> str:
    """The text of a wait as JSON holds it (a PostgreSQL board's summary), or of an old
    ``waiting_for`` string."""
    if isinstance(value, str):
        return from_text(value).text
    try:
        wait: Wait = msgspec.convert(value, AnyWait)
    except msgspec.ValidationError:
        return str(value)[:200]
    return wait.text


def as_dict(wait: Wait, task_id: str) -> dict[str, object]:
    """The wait as the JSON faces give it (MCP, ``--json``, hooks): its fields, ``label``,
    ``text`` and the ``actions`` with their commands."""
    return {**msgspec.to_builtins(wait), "label": wait.label, "text": wait.text,
            "actions": [{"name": a.name, "label": a.label,
                         "command": a.line(wait.ident or task_id), "field": a.field}
                        for a in wait.actions]}
