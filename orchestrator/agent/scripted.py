"""`ScriptedModel`: a deterministic model that replays a script, for the demo and tests.

It goes through the same loop, tools and permission gate as the real model,
and fails loudly: a model call past the last step, or a step that ends the
turn while later steps are left unused, raises `ScriptError`.

A script is JSON: a list of steps, or ``{"steps": [...]}``. Each step is one
assistant turn, written as

- a string: a text reply that ends the turn;
- a list of blocks: Messages API content blocks, or the shorthands ``"text"``
  and ``{"tool": "write", "args": {...}}`` (a ``tool_use`` with a generated id);
- ``{"content": [...], "stop_reason": "max_tokens"}`` to play a special stop.

Where a task's script comes from (see `load_script`): ``metadata.script`` of
the task (the steps inline, or a path relative to the repository root), else
the file named by the ``ORCH_SCRIPT`` environment variable.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from orchestrator.agent.base import ModelResponse
from orchestrator.errors import BackendError, InvalidInput
from orchestrator.model import Task

SCRIPT_ENV = "ORCH_SCRIPT"


class ScriptError(BackendError):
    """The run did not follow its script: an extra model call or steps left unused."""


class ScriptedModel:
    """Implements `orchestrator.agent.base.Model` by replaying ``steps``."""

    name = "scripted"

    def __init__(self, steps: list[Any]) -> None:
        self.steps = [parse_step(s, i) for i, s in enumerate(steps)]
        self.calls = 0
        self.requests: list[dict[str, Any]] = []

    def query(self, *, system: list[dict[str, Any]], messages: list[dict[str, Any]],
              tools: list[dict[str, Any]], max_tokens: int) -> ModelResponse:
        self.requests.append({"system": system, "messages": messages, "tools": tools})
        if self.calls >= len(self.steps):
            raise ScriptError(f"unexpected model call #{self.calls + 1}: the script has only "
                              f"{len(self.steps)} steps")
        step = self.steps[self.calls]
        self.calls += 1
        left = len(self.steps) - self.calls
        if step.stop_reason == "end_turn" and left:
            raise ScriptError(f"step {self.calls} ends the turn but {left} later steps "
                              f"are unused")
        return ModelResponse(content=step.content, stop_reason=step.stop_reason, model=self.name)

    def assert_done(self) -> None:
        if self.calls < len(self.steps):
            raise ScriptError(f"{len(self.steps) - self.calls} script steps unused "
                              f"(played {self.calls} of {len(self.steps)})")

    def close(self) -> None:
        pass


class _Step:
    def __init__(self, content: list[dict[str, Any]], stop_reason: str) -> None:
        self.content = content
        self.stop_reason = stop_reason


def parse_step(step: Any, index: int) -> _Step:
    where = f"script step {index + 1}"
    stop: str | None = None
    if isinstance(step, dict) and "content" in step:
        stop = step.get("stop_reason")
        step = step["content"]
    if isinstance(step, str):
        step = [step]
    if not isinstance(step, list) or not step:
        raise InvalidInput(f"{where}: expected text, a list of blocks or {{'content': [...]}}")
    blocks = [_block(b, f"{where}, block {k + 1}", f"toolu_s{index + 1:03d}_{k + 1}")
              for k, b in enumerate(step)]
    if stop is None:
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return _Step(blocks, stop)


def _block(b: Any, where: str, tool_id: str) -> dict[str, Any]:
    if isinstance(b, str):
        return {"type": "text", "text": b}
    if not isinstance(b, dict):
        raise InvalidInput(f"{where}: expected a string or an object")
    if "tool" in b:
        args = b.get("args", b.get("input", {}))
        if not isinstance(args, dict):
            raise InvalidInput(f"{where}: 'args' must be an object")
        return {"type": "tool_use", "id": b.get("id", tool_id), "name": str(b["tool"]),
                "input": args}
    if b.get("type") == "tool_use":
        return {"id": tool_id, "input": {}, **b}
    if b.get("type") == "text" and isinstance(b.get("text"), str):
        return b
    raise InvalidInput(f"{where}: unknown block {json.dumps(b)[:80]}")


def load_script(task: Task, root: Path, environ: dict[str, str] | None = None) -> list[Any]:
    """The steps for ``task`` (see the module docstring); `InvalidInput` when there are none."""
    env = os.environ if environ is None else environ
    source: Any = task.metadata.get("script")
    if source is None and env.get(SCRIPT_ENV):
        source = env[SCRIPT_ENV]
    if source is None:
        raise InvalidInput(f"{task.id}: the scripted backend needs a script "
                           f"(metadata.script in the task, or {SCRIPT_ENV}=path)")
    if isinstance(source, str):
        path = Path(source).expanduser()
        path = path if path.is_absolute() else root / path
        try:
            source = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"{task.id}: cannot read script {path}: {exc}") from exc
    if isinstance(source, dict):
        source = source.get("steps")
    if not isinstance(source, list):
        raise InvalidInput(f"{task.id}: a script is a list of steps or {{'steps': [...]}}")
    return source
