"""The master loop: query the model, run its tool calls, append the results, repeat.

    while True:
        check budgets and the stop flag           -> LimitExceeded / Stopped
        response = model.query(...)               (prompt too long -> compact, query again)
        messages += [assistant turn, user turn with every tool result]
                                                  (no tool call -> Finished)
        watch for no progress                     (told once, then NoProgress:
                                                   `orchestrator.agent.progress`)

Every ``tool_use`` gets exactly one ``tool_result`` in the next message, also
when the call is denied, errors, or waits on a person. A ``max_tokens`` stop
keeps the cut text, drops any half-written tool call, and asks the model to
go on. The transcript (requests, responses, tool calls and results) goes to
the task log as it happens; the closing record is written in ``finally``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from orchestrator.agent.base import (
    BudgetReached,
    Finished,
    LimitExceeded,
    LoopSignal,
    Model,
    ModelResponse,
    PermissionAsked,
    Stopped,
    ToolResult,
)
from orchestrator.agent.compact import ContextOverflow, compact
from orchestrator.agent.progress import Call, ProgressWatch
from orchestrator.agent.prompt import Prompt, with_message_breakpoints
from orchestrator.budget import Limit
from orchestrator.config import AgentConfig
from orchestrator.delivery import as_prompt
from orchestrator.model import Usage
from orchestrator.protocols import TaskLogger
from orchestrator.transcript import (
    AgentEnd,
    AgentStart,
    Compacted,
    MessagesDelivered,
    NoProgressWarning,
    PermissionAnswered,
    PermissionRequested,
    ToolCall,
    ToolReturned,
    TurnRequest,
    TurnResponse,
)

CONTINUE = "Your reply was cut off at the output limit. Continue exactly where you stopped."


class Toolset(Protocol):
    def call(self, name: str, args: dict[str, Any], *, approved: bool = False) -> ToolResult: ...


class AskHandler(Protocol):
    """Answers a permission request: (approved, message). `PermissionFlow.ask` is one."""

    def __call__(self, request: PermissionAsked) -> Any: ...


@dataclass
class LoopState:
    """The serialisable part of a run; everything else is injected."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    turns: int = 0
    compactions: int = 0
    started: float = field(default_factory=time.monotonic)


@dataclass
class Limits:
    max_turns: int | None = None
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    max_seconds: float | None = None
    budgets: list[Limit] = field(default_factory=list)
    """The task's budget over all its runs and the shared ones (`orchestrator.budget`)."""

    @classmethod
    def of(cls, agent: AgentConfig, timeout: float | None = None,
           budgets: list[Limit] | None = None) -> Limits:
        seconds = [s for s in (agent.max_seconds, timeout) if s]
        return cls(agent.max_turns, agent.max_total_tokens, agent.max_cost_usd,
                   min(seconds) if seconds else None, list(budgets or []))

    def check(self, state: LoopState) -> None:
        u = state.usage
        used = u.tokens
        elapsed = time.monotonic() - state.started
        run = msgspec.structs.replace(u, seconds=elapsed)
        for limit in self.budgets:
            reason = limit.reached(run)
            if reason:
                raise BudgetReached(reason)
        if self.max_turns is not None and state.turns >= self.max_turns:
            raise LimitExceeded(f"turn limit reached: {state.turns} of {self.max_turns} turns")
        if self.max_total_tokens is not None and used >= self.max_total_tokens:
            raise LimitExceeded(f"token budget spent: {used} of {self.max_total_tokens} tokens")
        if self.max_cost_usd is not None and u.cost_usd >= self.max_cost_usd:
            raise LimitExceeded(f"cost budget spent: ${u.cost_usd:.4f} of "
                                f"${self.max_cost_usd:.2f}")
        if self.max_seconds is not None and elapsed >= self.max_seconds:
            raise LimitExceeded(f"time budget spent: {elapsed:.0f} s of {self.max_seconds:.0f} s")


class AgentLoop:
    def __init__(self, model: Model, toolset: Toolset, prompt: Prompt, log: TaskLogger, *,
                 limits: Limits, max_tokens: int, stop: threading.Event | None = None,
                 ask: AskHandler | None = None,
                 on_usage: Callable[[Usage], None] | None = None,
                 inbox: Callable[[], str] | None = None,
                 watch: ProgressWatch | None = None,
                 after_change: Callable[[], None] | None = None) -> None:
        self.model, self.toolset, self.prompt, self.log = model, toolset, prompt, log
        self.after_change = after_change
        """Called after a step with a successful call of a tool that is not read-only."""
        self.inbox = inbox
        """New messages for the agent (``orchestrator send``), put in front of the model at
        its next step."""
        self.limits, self.max_tokens = limits, max_tokens
        self.watch = watch or ProgressWatch(0, 0, 0)  # off unless the backend configures it
        self.stop = stop or threading.Event()
        self.ask, self.on_usage = ask, on_usage
        self.state = LoopState()

    def run(self, first_message: str | None = None,
            resume: list[dict[str, Any]] | None = None) -> str:
        """Run until the model ends its turn and return its summary; budgets raise
        `LimitExceeded`, a warm stop `Stopped`, model failures `BackendError`.
        ``resume``: the messages of a run that stopped between steps, continued as they are."""
        waiting = self.inbox() if self.inbox is not None else ""
        if resume:
            self.state.messages = list(resume)
            if waiting:
                self.state.messages.append({"role": "user", "content": as_prompt(waiting)})
        else:
            first = first_message or self.prompt.first_message
            if waiting:
                first = f"{first}\n\n{as_prompt(waiting)}"
            self.state.messages.append({"role": "user", "content": first})
        self.log.write(AgentStart(model=self.model.name, system=self.prompt.system,
                                  tools=[t["name"] for t in self.prompt.tools],
                                  first_message=self.state.messages[0]["content"],
                                  resumed=len(self.state.messages) if resume else None))
        outcome = "error"
        try:
            while True:
                self.state.messages.extend(self.step(self.query()))
        except Finished as done:
            outcome = "finished"
            return done.summary
        except LoopSignal as signal:
            outcome = type(signal).__name__
            raise
        finally:
            self.log.write(AgentEnd(outcome=outcome, turns=self.state.turns,
                                    compactions=self.state.compactions,
                                    usage=self.state.usage))

    def query(self) -> ModelResponse:
        if self.stop.is_set():
            raise Stopped("stop requested")
        self.limits.check(self.state)
        while True:
            messages = with_message_breakpoints(self.state.messages)
            self.log.write(TurnRequest(turn=self.state.turns + 1, messages=len(messages),
                                       bytes=len(json.dumps(messages))))
            try:
                response = self.model.query(system=self.prompt.system, messages=messages,
                                            tools=self.prompt.tools, max_tokens=self.max_tokens)
                break
            except ContextOverflow as exc:
                self.state.messages = compact(self.state.messages)
                self.state.compactions += 1
                self.log.write(Compacted(reason=str(exc), messages=len(self.state.messages)))
        self.state.turns += 1
        self.state.usage = self.state.usage.add(response.usage)
        self.log.write(TurnResponse(turn=self.state.turns, content=response.content,
                                    stop_reason=response.stop_reason, usage=response.usage))
        if self.on_usage is not None:
            self.on_usage(self.state.usage)
        return response

    def step(self, response: ModelResponse) -> list[dict[str, Any]]:
        """The assistant turn and the user turn that answers it; `Finished` when done."""
        content = response.content
        if response.stop_reason == "max_tokens":
            content = [b for b in content if b.get("type") != "tool_use"] or [
                {"type": "text", "text": "…"}]
            return [{"role": "assistant", "content": content},
                    {"role": "user", "content": CONTINUE}]
        calls = [b for b in content if b.get("type") == "tool_use"]
        text = "\n".join(b["text"] for b in content if b.get("type") == "text")
        results = [self.call(b) for b in calls]
        if self.after_change is not None and any(
                not r.get("is_error") and self._may_change_files(b["name"])
                for b, r in zip(calls, results, strict=True)):
            self.after_change()
        news = self.inbox() if self.inbox is not None else ""
        if news:
            self.log.write(MessagesDelivered(text=news))
        if not calls and not news:
            raise Finished(text)
        if calls:
            note = self.watch.turn(text, [Call(b["name"], b.get("input") or {}, r["content"],
                                               bool(r.get("is_error"))) for b, r in zip(
                                                   calls, results, strict=True)])
            if note:  # told once; going on after it raises NoProgress
                self.log.write(NoProgressWarning(note=note))
                results.append({"type": "text", "text": note})
        extra = [{"type": "text", "text": as_prompt(news)}] if news else []
        return [{"role": "assistant", "content": content},
                {"role": "user", "content": [*results, *extra]}]

    def _may_change_files(self, name: str) -> bool:
        """False only for a tool known to be read-only."""
        get = getattr(self.toolset, "get", None)
        tool = get(name) if get is not None else None
        return tool is None or not getattr(tool, "read_only", False)

    def call(self, block: dict[str, Any]) -> dict[str, Any]:
        name, args = block["name"], block.get("input") or {}
        self.log.write(ToolCall(id=block["id"], name=name, input=args))
        try:
            result = self.toolset.call(name, args)
        except PermissionAsked as request:
            result = self.permission(request, name, args)
        except LoopSignal:
            raise
        except Exception as exc:  # a broken tool must not break the pairing
            result = ToolResult(f"{name} failed: {type(exc).__name__}: {exc}", is_error=True)
        self.log.write(ToolReturned(id=block["id"], name=name, content=result.content,
                                    is_error=result.is_error))
        out: dict[str, Any] = {"type": "tool_result", "tool_use_id": block["id"],
                               "content": result.content}
        if result.is_error:
            out["is_error"] = True
        return out

    def permission(self, request: PermissionAsked, name: str, args: dict[str, Any]
                   ) -> ToolResult:
        if self.ask is None:
            return ToolResult(f"{request}: no one can approve it in this run", is_error=True)
        self.log.write(PermissionRequested(request_id=request.request_id, tool=name,
                                           subject=request.subject))
        answer = self.ask(request)
        self.log.write(PermissionAnswered(request_id=request.request_id,
                                          approved=answer.approved, message=answer.message))
        if not answer.approved:
            why = f": {answer.message}" if answer.message else ""
            return ToolResult(f"permission denied by a person{why}", is_error=True)
        return self.toolset.call(name, args, approved=True)
