"""Compaction: when the prompt no longer fits the context window, keep going.

The older turns are replaced by one user message that restates the task and
summarises what happened (each tool call with the start of its result); the
last turns stay verbatim. The cut is always made before an assistant message,
so every kept ``tool_use`` still has its ``tool_result`` right after it and no
kept ``tool_result`` points at a dropped call.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.errors import BackendError

KEEP_TURNS = 4
"""Assistant turns kept verbatim after a compaction."""
PREVIEW_CHARS = 300


class ContextOverflow(BackendError):
    """The request is larger than the model's context window ("prompt is too long")."""


def compact(messages: list[dict[str, Any]], keep_turns: int = KEEP_TURNS
            ) -> list[dict[str, Any]]:
    """A shorter conversation with the same task and the same recent turns.

    Raises `ContextOverflow` when there is nothing left to drop.
    """
    starts = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if len(starts) <= 1:
        raise ContextOverflow("the prompt is too long even with every older turn compacted")
    cut = starts[max(1, len(starts) - keep_turns)]
    summary = summarize(messages[:cut])
    return [{"role": "user", "content": [{"type": "text", "text": summary}]}, *messages[cut:]]


def summarize(messages: list[dict[str, Any]]) -> str:
    task = _text(messages[0]["content"]) if messages else ""
    results: dict[str, str] = {}
    for m in messages:
        for b in _blocks(m):
            if b.get("type") == "tool_result":
                results[b["tool_use_id"]] = _preview(_text(b.get("content", "")))
    lines = []
    for m in messages[1:]:
        for b in _blocks(m):
            if b.get("type") == "text" and m["role"] == "assistant" and b["text"].strip():
                lines.append(f"- you said: {_preview(b['text'])}")
            elif b.get("type") == "tool_use":
                args = _preview(json.dumps(b.get("input", {}), ensure_ascii=False))
                lines.append(f"- {b['name']}({args}) -> {results.get(b['id'], '(no result)')}")
    return (f"{task}\n\n[Earlier turns were compacted to fit the context window. "
            f"What you did so far:]\n" + "\n".join(lines) +
            "\n\nContinue the task from where you left off.")


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    c = message["content"]
    return [{"type": "text", "text": c}] if isinstance(c, str) else list(c)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")


def _preview(s: str) -> str:
    s = " ".join(s.split())
    return s if len(s) <= PREVIEW_CHARS else s[:PREVIEW_CHARS] + "…"
