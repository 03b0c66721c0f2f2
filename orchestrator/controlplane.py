"""The control plane behind one interface: everything the lead, the teammates, the CLI,
the MCP server and the review code share.

`orchestrator.board.open_board` is the one place that opens a board; the object it
returns (a `ControlPlane`) is the task `Board` itself and hands out the rest:

    board = open_board(layout, config.board, actor="alice")
    board.claim("alice")                      # tasks            (Board)
    board.events.emit(Committed(sha=…), tid)  # the audit log    (Events)
    board.mailboxes.send("lead", "alice", …)  # mailboxes        (Mailboxes)
    board.logs.append(tid, Commit(sha=…))     # task transcripts (TaskLogs)
    board.team.publish("alice", "working", …) # teammate status  (TeamStatus)
    board.requests.ask(…)                     # permission/plan  (Requests)
    board.ids.next()                          # the id sequence  (Ids)

No signature here names a `Path`, a `Layout` or anything else only files have: a
second implementation (PostgreSQL) provides the same methods over its own storage.

What a second implementation must provide (the conformance suite in
``tests/conformance/`` checks each point; adding an implementation is one fixture
parameter there):

- **Tasks** (`Board`): every method safe from many processes on many machines. One
  winner per claim; each claim's lease token one higher than the task's last
  (``Task.fence``); fenced writes with an older token raise `LeaseLost` and change
  nothing; `requeue_expired` / `requeue_owner` count an attempt; `ready` in claim
  order (priority, then id), blockers in review/merged; `problems` names cycles and
  unknown blockers; `summary` counts what `list` holds without listing it.
  ``task_created`` is in the event log before the task can be claimed.
  `wait_for_change` / `wait_for_ready` block without busy polling and wake on another
  process's write.
- **Events**: `Events.emit` assigns ``seq`` strictly increasing per board across all
  writers and returns the stored event; a reader never sees seq N+1 before seq N is
  readable (append order = seq order). `read(since=, task=)` must not scan the whole
  log for one task; `follow` yields past then new events; `tail` the newest ones.
  Values that look like this process's secrets are masked before they are stored.
- **Mailboxes**: per-recipient, message order kept; `unread` / `ack` keep a read
  position per (mailbox, reader) so a crashed reader sees unacknowledged mail again;
  reading never deletes (the history stays visible).
- **TaskLogs**: append-only JSON records per log name (a task id, ``task_001.sub-1``,
  ``plan-…``), torn records skipped on read, `follow` like ``tail -f``.
- **TeamStatus**: last published state per teammate (atomic: a reader sees the old or
  new state, never half), `remove` forgets one.
- **Requests**: `ask` records a pending request; `answer` answers one by request id
  (`NotFound` when nothing matches), at most once; `answer_of` / `wait` let the asker
  poll or block; `pending` lists what is unanswered, oldest first.
- **Ids**: `Ids.next` never hands out an id twice, even to several processes.

Records that travel between modules (`Event`, `Message`, `LogRecord`, `TeammateState`,
`Request`, `Answer`) are frozen msgspec Structs defined here (a dataclass costs a
millisecond of every command's start to make); their ``to_dict`` is the JSON form
the CLI prints and the file implementation stores.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Collection, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self, runtime_checkable

import msgspec

from orchestrator.events import AnyEvent, decode

if TYPE_CHECKING:  # the board package imports this module: no cycle at run time
    from orchestrator.model import Status, Task
    from orchestrator.transcript import LogEntry

# --- records -------------------------------------------------------------------------


class Event(msgspec.Struct, frozen=True):
    """One entry of the audit log. ``fields`` holds everything beyond the five columns;
    `decode` reads them as the event's kind (`orchestrator.events`)."""

    seq: int
    """Position in the board's log: strictly increasing per board (0: an event written
    before events had a seq)."""
    ts: str
    event: str
    task: str | None
    actor: str
    fields: dict[str, Any] = msgspec.field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        """A column or a field by name, as on the JSON form (``e.get("status")``)."""
        if key in _EVENT_COLUMNS:
            return getattr(self, key)
        return self.fields.get(key, default)

    def __getitem__(self, key: str) -> Any:
        if key in _EVENT_COLUMNS:
            return getattr(self, key)
        return self.fields[key]

    def __contains__(self, key: str) -> bool:
        return key in _EVENT_COLUMNS or key in self.fields

    def decode(self) -> AnyEvent | None:
        """This event as its typed kind; None for a kind this code does not know or
        fields that do not fit it (an old or hand-edited line)."""
        return decode(self.event, self.fields)

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "ts": self.ts, "event": self.event, "task": self.task,
                "actor": self.actor, **self.fields}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Event:
        seq = d.get("seq")
        task = d.get("task")
        return cls(seq=seq if isinstance(seq, int) and not isinstance(seq, bool) else 0,
                   ts=str(d.get("ts") or ""), event=str(d.get("event") or ""),
                   task=None if task is None else str(task), actor=str(d.get("actor") or ""),
                   fields={k: v for k, v in d.items() if k not in _EVENT_COLUMNS})


_EVENT_COLUMNS = frozenset({"seq", "ts", "event", "task", "actor"})


class Message(msgspec.Struct, frozen=True):
    """One mailbox message. Kinds in use: ``message``, ``shutdown_request`` /
    ``shutdown_response``, ``permission_request`` / ``permission_response``,
    ``plan_request`` / ``plan_response``."""

    id: str
    ts: str
    sender: str
    to: str
    kind: str
    body: str = ""
    fields: dict[str, Any] = msgspec.field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        """A column or field by its JSON name (``"from"`` is the sender)."""
        if key == "from":
            return self.sender
        if key in _MESSAGE_COLUMNS:
            return getattr(self, key)
        return self.fields.get(key, default)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "ts": self.ts, "from": self.sender, "to": self.to,
                "kind": self.kind, "body": self.body, **self.fields}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Message:
        return cls(id=str(d.get("id") or ""), ts=str(d.get("ts") or ""),
                   sender=str(d.get("from") or ""), to=str(d.get("to") or ""),
                   kind=str(d.get("kind") or ""), body=str(d.get("body") or ""),
                   fields={k: v for k, v in d.items()
                           if k not in _MESSAGE_COLUMNS and k != "from"})


_MESSAGE_COLUMNS = frozenset({"id", "ts", "sender", "to", "kind", "body"})


class LogRecord(msgspec.Struct, frozen=True):
    """One record of a task's transcript (backend output, turns, tool calls, checks)."""

    ts: str
    kind: str
    actor: str | None = None
    fields: dict[str, Any] = msgspec.field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        if key in ("ts", "kind", "actor"):
            return getattr(self, key)
        return self.fields.get(key, default)

    def __getitem__(self, key: str) -> Any:
        if key in ("ts", "kind", "actor"):
            return getattr(self, key)
        return self.fields[key]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ts": self.ts, "kind": self.kind}
        if self.actor:
            out["actor"] = self.actor
        return {**out, **self.fields}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LogRecord:
        actor = d.get("actor")
        return cls(ts=str(d.get("ts") or ""), kind=str(d.get("kind") or ""),
                   actor=None if actor is None else str(actor),
                   fields={k: v for k, v in d.items() if k not in ("ts", "kind", "actor")})


class BoardSummary(msgspec.Struct, frozen=True):
    """What `Board.summary` answers: the board's totals, as ``orchestrator status`` shows
    them."""

    counts: dict[str, int]
    """Tasks per status, every status named (0 when none)."""
    cost_usd: float
    """What every task's agent spent, summed (rounded to 6 places)."""
    tokens: int
    waiting: list[tuple[str, str]] = msgspec.field(default_factory=list)
    """(task id, its wait's text) of each task that waits for a person (`orchestrator.waits`;
    running tasks' requests are the board's ``requests``), by id."""


TeammateStateName = Literal["starting", "idle", "working", "blocked", "stopped"]


class TeammateState(msgspec.Struct, frozen=True):
    """What a teammate last said it is doing (written by itself, or by the lead)."""

    name: str
    state: str
    """``idle``, ``working``, ``blocked`` or ``stopped`` (see `TeammateStateName`)."""
    updated_at: str = ""
    pid: int | None = None
    host: str | None = None
    """The machine it runs on (None: this one)."""
    task: str | None = None
    since: str | None = None
    started_at: str | None = None
    backend_pgid: int | None = None
    error: str | None = None
    exit: str | None = None
    """How its process ended (``exit code 1``, ``killed by signal 9``)."""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in msgspec.structs.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TeammateState:
        def opt_int(v: Any) -> int | None:
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        def opt_str(v: Any) -> str | None:
            return None if v is None else str(v)

        return cls(name=str(d.get("name") or ""), state=str(d.get("state") or "stopped"),
                   updated_at=str(d.get("updated_at") or ""), pid=opt_int(d.get("pid")),
                   host=opt_str(d.get("host")), task=opt_str(d.get("task")),
                   since=opt_str(d.get("since")), started_at=opt_str(d.get("started_at")),
                   backend_pgid=opt_int(d.get("backend_pgid")), error=opt_str(d.get("error")),
                   exit=opt_str(d.get("exit")))


RequestKind = Literal["permission", "plan"]


class Request(msgspec.Struct, frozen=True):
    """A teammate's question to a person: may a tool run (``permission``), is this plan
    good (``plan``)."""

    id: str
    kind: RequestKind
    task: str | None
    sender: str
    """The asking teammate (the answer goes back to it)."""
    body: str
    ts: str = ""
    fields: dict[str, Any] = msgspec.field(default_factory=dict)
    """``tool`` and ``subject`` for a permission, ``plan`` for a plan."""

    def to_dict(self) -> dict[str, Any]:
        return {"request_id": self.id, "kind": self.kind, "task": self.task,
                "from": self.sender, "body": self.body, "ts": self.ts, **self.fields}


class Answer(msgspec.Struct, frozen=True):
    approved: bool
    message: str = ""
    by: str = ""


# --- the protocols -------------------------------------------------------------------


class Events(Protocol):
    """The append-only audit log of one board."""

    def emit(self, event: AnyEvent, task: str | None = None,
             actor: str | None = None) -> Event:
        """Append one event of ``task`` (``actor`` defaults to the board's); returns it
        with its seq."""
        ...
    def read(self, *, since: int = 0, task: str | None = None) -> Iterator[Event]:
        """Events with ``seq > since`` (of ``task`` only, when given), oldest first.
        Reading one task's events parses only that task's lines."""
        ...
    def follow(self, *, since: int = 0, task: str | None = None,
               stop: threading.Event | None = None, poll: float = 0.2) -> Iterator[Event]:
        """Like ``tail -f``: `read` from ``since``, then new events as they are appended,
        until ``stop`` is set."""
        ...
    def tail(self, n: int, *, task: str | None = None) -> list[Event]:
        """The newest ``n`` events (of ``task``), oldest first."""
        ...
    def last_seq(self) -> int:
        """The seq of the newest event (0 when the log is empty): `read(since=last_seq())`
        sees only what comes later."""
        ...


class Mailboxes(Protocol):
    """One mailbox per name (``lead``, each teammate); appends keep order."""

    def send(self, to: str, sender: str, body: str = "", *, kind: str = "message",
             **fields: Any) -> Message:
        """Append a message to ``to``'s mailbox; returns it with its new id.
        A bad mailbox name raises `InvalidInput`."""
        ...
    def read(self, name: str) -> list[Message]:
        """Every message ever sent to ``name``, oldest first (moves no read position)."""
        ...
    def find(self, name: str, **match: Any) -> list[Message]:
        """Messages to ``name`` whose fields equal ``match`` (``kind=``, ``request_id=`` …)."""
        ...
    def unread(self, name: str, reader: str | None = None) -> list[Message]:
        """Messages after ``reader``'s acknowledged position (default reader: the owner)."""
        ...
    def ack(self, name: str, message_id: str, reader: str | None = None) -> None:
        """Move ``reader``'s position past ``message_id`` (and everything before it)."""
        ...


class ActorEvents:
    """``events`` whose `emit` writes as ``actor`` unless told otherwise (for a component
    that records under its own name, such as ``worktree`` or ``hooks``)."""

    def __init__(self, events: Events, actor: str) -> None:
        self.inner, self.actor = events, actor

    def emit(self, event: AnyEvent, task: str | None = None,
             actor: str | None = None) -> Event:
        return self.inner.emit(event, task, actor=actor or self.actor)

    def read(self, *, since: int = 0, task: str | None = None) -> Iterator[Event]:
        return self.inner.read(since=since, task=task)

    def follow(self, *, since: int = 0, task: str | None = None,
               stop: threading.Event | None = None, poll: float = 0.2) -> Iterator[Event]:
        return self.inner.follow(since=since, task=task, stop=stop, poll=poll)

    def tail(self, n: int, *, task: str | None = None) -> list[Event]:
        return self.inner.tail(n, task=task)

    def last_seq(self) -> int:
        return self.inner.last_seq()


class TaskLogger(Protocol):
    """Appends records to one task's transcript."""

    def write(self, entry: LogEntry) -> None: ...


class TaskLogs(Protocol):
    """Transcripts by log name: a task id, ``<task>.sub-<n>`` (a subagent's),
    ``plan-<time>`` (a planning run)."""

    def writer(self, name: str, actor: str | None = None) -> TaskLogger:
        """A logger appending to ``name`` (long strings cut, secrets masked)."""
        ...
    def append(self, name: str, entry: LogEntry, /, *, actor: str | None = None) -> None: ...
    def read(self, name: str) -> Iterator[LogRecord]:
        """Every complete record, oldest first (none when the log does not exist)."""
        ...
    def follow(self, name: str, *, stop: threading.Event | None = None,
               poll: float = 0.2) -> Iterator[LogRecord]: ...
    def exists(self, name: str) -> bool: ...
    def names(self, prefix: str) -> list[str]:
        """The log names starting with ``prefix`` (``task_001.sub-`` → its subagents)."""
        ...


class TeamStatus(Protocol):
    """What each teammate is doing, as it last said (heartbeat + state)."""

    def publish(self, name: str, state: str, **fields: Any) -> TeammateState:
        """Record ``name``'s state (``pid``, ``task``, ``since``, ``error`` …, see
        `TeammateState`); stamps ``updated_at`` (the heartbeat)."""
        ...
    def get(self, name: str) -> TeammateState | None: ...
    def all(self) -> list[TeammateState]:
        """Every teammate that published a state, by name."""
        ...
    def remove(self, name: str) -> None: ...


class Requests(Protocol):
    """Permission and plan requests: a teammate asks, a person answers."""

    def ask(self, kind: RequestKind, *, request_id: str, sender: str, task: str | None,
            body: str, **fields: Any) -> Request: ...
    def pending(self) -> list[Request]:
        """Requests nobody has answered yet, oldest first."""
        ...
    def answer(self, request_id: str, *, approved: bool, message: str = "",
               actor: str = "cli") -> Request:
        """Answer a pending request; `NotFound` when ``request_id`` is not pending."""
        ...
    def answer_of(self, request_id: str) -> Answer | None:
        """The answer, once there is one (the asker polls this)."""
        ...
    def wait(self, request_id: str, *, stop: threading.Event | None = None,
             timeout: float | None = None, poll: float = 0.25) -> Answer | None:
        """Block until the answer arrives (None: ``stop`` was set or ``timeout`` passed)."""
        ...


class Ids(Protocol):
    """The task id sequence."""

    def next(self) -> str:
        """Reserve and return the next task id (never handed out twice)."""
        ...
    def high_water(self) -> int:
        """The highest task number handed out so far."""
        ...


@runtime_checkable
class Board(Protocol):
    """The task board. Every method is safe to call from many processes at once.

    Fenced methods take the lease ``token`` from the claim; a token older than
    the task's current lease raises `LeaseLost` and changes nothing.
    Unknown ids raise `NotFound`; lifecycle violations raise `InvalidTransition`.
    """

    # --- reading -----------------------------------------------------------
    def get(self, task_id: str) -> Task: ...
    def list(self, status: Status | Collection[Status] | None = None, *,
             after: str | None = None, limit: int | None = None) -> builtins.list[Task]:
        """Every task (with ``status`` when given), by id; a page of them with ``after`` (only
        ids above it: a keyset, so the next page starts at the last id of this one, and
        the id need not exist) and ``limit`` (at most that many)."""
        ...
    def ready(self) -> builtins.list[Task]:
        """Claimable tasks (pending, blockers in review/merged), in claim order."""
        ...
    def problem(self, task_id: str) -> str | None:
        """Why this one task can never become ready (None: nothing keeps it), without
        working out every task's problems."""
        ...
    def problems(self) -> dict[str, str]:
        """Task id -> why it can never become ready (dependency cycle, unknown blocker)."""
        ...
    def summary(self) -> BoardSummary:
        """Tasks per status, the spending summed over every task, and the failed tasks
        waiting for a person, without reading every task."""
        ...

    # --- writing (people and the lead) --------------------------------------
    def add(self, subject: str, *, description: str = "", blocked_by: Collection[str] = (),
            priority: int = 0, actor: str = "cli", **fields: Any) -> Task:
        """A new pending task; its ``task_created`` event is written before any
        claimer can see it."""
        ...
    def edit(self, task_id: str, *, actor: str, **fields: Any) -> Task:
        """Unfenced change of non-status fields (feedback, metadata …)."""
        ...
    def set_status(self, task_id: str, status: Status, *, actor: str, **fields: Any) -> Task:
        """Unfenced status change for the lead and people (merge, discard, retry).
        Leaving ``in_progress`` this way clears the lease."""
        ...
    def cancel(self, task_id: str, *, actor: str = "cli") -> Task: ...
    def intake(self, *, repair: bool = True) -> builtins.list[Task]:
        """Turn dropped tasks (the file board's inbox) into tasks; ``repair``: also put
        right (or reject) stored tasks that do not validate, where a board can have such."""
        ...
    def rejected_drops(self) -> builtins.list[str]:
        """The dropped files this object's last `intake` rejected, relative to the
        repository (each with ``<name>.error.txt`` beside it); empty when none."""
        ...
    def settling(self) -> float | None:
        """Seconds until the last dropped file still being written will be taken in or
        rejected; None when none is (a burst is not finished while one is)."""
        ...

    # --- claims and leases (teammates) --------------------------------------
    def claim(self, owner: str, *, lease_seconds: float | None = None,
              task_id: str | None = None) -> Task | None:
        """Claim the next ready task (or ``task_id``); the returned task's ``lease.token``
        is the fencing token. None when nothing is claimable."""
        ...
    def renew(self, task_id: str, token: int, *, lease_seconds: float | None = None) -> Task: ...
    def update(self, task_id: str, token: int, **fields: Any) -> Task:
        """Fenced write of non-status fields (worktree, branch, usage, waiting_for …)."""
        ...
    def complete(self, task_id: str, token: int, **fields: Any) -> Task:
        """in_progress -> review; the lease is cleared."""
        ...
    def fail(self, task_id: str, token: int, error: str, *, retry: bool = True) -> Task:
        """Counts an attempt; back to pending while attempts remain and ``retry``, else failed."""
        ...
    def release(self, task_id: str, token: int, *, reason: str = "") -> Task:
        """Give the task back (warm stop); does not count an attempt."""
        ...
    def requeue_expired(self, *, now: float | None = None,
                        actor: str = "lead") -> builtins.list[Task]: ...
    def requeue_owner(self, owner: str, *, reason: str, actor: str = "lead") -> builtins.list[Task]:
        """The lead saw ``owner``'s process die: requeue its tasks at once (counts an attempt)."""
        ...

    # --- change feed ----------------------------------------------------------
    def wait_for_change(self, timeout: float, *, events: bool = True,
                        running: bool = True) -> bool:
        """Block until the board may have changed (another process's write, a dropped task)
        or ``timeout`` passes. True if woken by a change. ``events=False``: an event
        appended alone is no change (only a lead with a forge thread acts on one, a
        webhook's). ``running=False``, for a teammate: nor need a claim or a write of a
        running task be one (a teammate acts on tasks that may be claimed, its own task's
        end, its mail and requests). Both are hints a board may ignore."""
        ...
    def wait_for_ready(self, timeout: float) -> bool:
        """Block until some task is ready or ``timeout`` passes; True if one is."""
        ...
    def close(self) -> None: ...


@runtime_checkable
class ControlPlane(Board, Protocol):
    """What `orchestrator.board.open_board` returns: the task board plus the rest of the
    control plane. One object per process (or per thread that waits on it); a context
    manager that closes it."""

    @property
    def events(self) -> Events: ...
    @property
    def mailboxes(self) -> Mailboxes: ...
    @property
    def logs(self) -> TaskLogs: ...
    @property
    def team(self) -> TeamStatus: ...
    @property
    def requests(self) -> Requests: ...
    @property
    def ids(self) -> Ids: ...
    @property
    def actor(self) -> str:
        """Who this process writes as (the default ``actor`` of its events)."""
        ...
    def now(self) -> float:
        """The board's clock, epoch seconds: what leases expire by and timestamps are
        written on (the database's for a board shared across machines, whose clocks may
        be off; this machine's for the file board)."""
        ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> None: ...
