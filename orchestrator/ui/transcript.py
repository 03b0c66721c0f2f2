"""A task's transcript record (``.tasks/logs/<id>.jsonl``) as one readable entry of the
task page: assistant text, tool calls and their results, output, checks."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.transcript import (
    Output,
    ToolCall,
    ToolReturned,
    TurnResponse,
    VerifyFinished,
    parse,
)

MAX_TEXT = 4000


def entry(rec: dict[str, Any]) -> dict[str, str]:
    """``{ts, kind, actor, title, text}`` for one record; every value a string."""
    kind = str(rec.get("kind", "?"))
    title, text = kind, ""
    match parse(rec):
        case TurnResponse(content=content):
            parts = []
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text":
                    parts.append(str(block.get("text", "")))
                elif block.get("type") == "tool_use":
                    parts.append(f"→ {block.get('name')}({_json(block.get('input'))})")
            title, text = "assistant", "\n".join(parts)
        case ToolCall(name=name, input=args):
            title, text = f"tool call: {name}", _json(args)
        case ToolReturned(name=name, content=content, is_error=is_error):
            title = f"result of {name}" + (" (error)" if is_error else "")
            text = _content(content)
        case Output(text=text):
            pass
        case VerifyFinished(passed=passed, result=result):
            title, text = "checks " + ("passed" if passed else "failed"), result
        case _:
            rest = {k: v for k, v in rec.items() if k not in ("ts", "kind", "actor")}
            text = _json(rest) if rest else ""
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + f"\n… ({len(text) - MAX_TEXT} more characters: "\
                                 "orchestrator logs shows all)"
    return {"ts": str(rec.get("ts", ""))[11:19], "kind": kind,
            "actor": str(rec.get("actor") or ""), "title": title, "text": text}


def _content(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(str(b.get("text", "")) if isinstance(b, dict) else str(b)
                         for b in value)
    return _json(value)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
