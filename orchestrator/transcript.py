"""A task's log (``.tasks/logs/<task>.jsonl``) as a person reads it: ``orchestrator logs``.

The agent's text; each tool call with its key argument and a short result; Claude Code's
stream the same way; command output as printed; checks, commits, errors and costs. Model
requests, system prompts and raw stream messages are left out (``logs --raw`` has them).
"""

from __future__ import annotations

import json
from typing import Any

KEY_ARGS = ("command", "file_path", "path", "pattern", "url", "notebook_path", "query",
            "description", "prompt", "subject", "id")
"""A tool call is shown with the first of these arguments it has."""
WIDTH = 100


def render(rec: dict[str, Any]) -> str | None:
    """The lines for one record, or None for a record a person does not need."""
    kind = str(rec.get("kind", "?"))
    ts = str(rec.get("ts", ""))[11:19]
    if kind in ("output", "verify_output"):
        return str(rec.get("text", "")).rstrip("\n")
    if kind in ("request", "tool_call"):
        return None  # the response shows the call; the request is the model's input
    if kind == "response":
        return _blocks(rec.get("content"), ts)
    if kind == "tool_result":
        return _result(rec.get("content"), bool(rec.get("is_error")))
    if kind == "claude_code":
        return _claude(rec.get("message"), ts)
    line = _event(kind, rec)
    return f"[{ts}] {line}" if line else None


def _event(kind: str, rec: dict[str, Any]) -> str | None:
    if kind == "agent_start":
        return f"agent started ({rec.get('model')}): {_clip(str(rec.get('first_message', '')))}"
    if kind == "agent_end":
        usage = rec.get("usage") or {}
        tokens = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
        cost = float(usage.get("cost_usd", 0.0))
        return (f"agent ended: {rec.get('outcome')} after {rec.get('turns')} turn(s), "
                f"{tokens} tokens, ${cost:.4f}")
    if kind == "backend_started":
        what = rec.get("command") or " ".join(map(str, rec.get("argv") or []))
        return f"{rec.get('backend')} started: {_clip(str(what))}"
    if kind == "backend_finished":
        return f"{rec.get('backend')} finished: {rec.get('result')} in {rec.get('seconds')}s"
    if kind == "verify_started":
        return f"checks: {rec.get('command')}"
    if kind == "verify_finished":
        return f"checks {'passed' if rec.get('passed') else 'failed'}: {rec.get('result')}"
    if kind == "commit":
        return f"committed {str(rec.get('sha', ''))[:12]}"
    if kind == "error":
        return f"error: {rec.get('error')}"
    if kind == "abandoned":
        return f"abandoned: {rec.get('reason')}"
    if kind == "checks_retry":
        return f"checks failed; back to the agent with their output ({rec.get('round')}/" \
               f"{rec.get('of')})"
    if kind == "messages_delivered":
        return f"messages delivered to the agent:\n{_indent(str(rec.get('text', '')))}"
    rest = " ".join(f"{k}={_short(v)}" for k, v in rec.items() if k not in ("ts", "kind",
                                                                             "actor"))
    return f"{kind} {rest}".rstrip()


def _blocks(content: Any, ts: str) -> str | None:
    lines = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and str(block.get("text", "")).strip():
            lines.append(str(block["text"]).strip())
        elif block.get("type") == "tool_use":
            lines.append(f"→ {block.get('name')}({_key_arg(block.get('input'))})")
    return "\n".join(lines) if lines else None


def _result(content: Any, error: bool) -> str:
    text = content if isinstance(content, str) else _text_of(content)
    lines = text.strip().splitlines() or [""]
    more = f" (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
    return f"  {'✗' if error else '←'} {_clip(lines[0], WIDTH - 20)}{more}"


def _claude(msg: Any, ts: str) -> str | None:
    if not isinstance(msg, dict):
        return None
    kind = msg.get("type")
    got = msg.get("message")
    inner: dict[str, Any] = got if isinstance(got, dict) else {}
    if kind == "assistant":
        return _blocks(inner.get("content"), ts)
    if kind == "user":
        parts = [_result(b.get("content"), bool(b.get("is_error")))
                 for b in inner.get("content") or [] if isinstance(b, dict)
                 and b.get("type") == "tool_result"]
        return "\n".join(parts) or None
    if kind == "system" and msg.get("subtype") == "init":
        return f"[{ts}] Claude Code session {msg.get('session_id')} ({msg.get('model')})"
    if kind == "result":
        cost = msg.get("total_cost_usd")
        return (f"[{ts}] Claude Code {msg.get('subtype')}: {msg.get('num_turns')} turn(s)"
                + (f", ${float(cost):.4f}" if isinstance(cost, int | float) else ""))
    return None


def _key_arg(args: Any) -> str:
    if not isinstance(args, dict):
        return ""
    for key in KEY_ARGS:
        if isinstance(args.get(key), str):
            return _clip(args[key], 80)
    return _clip(", ".join(f"{k}={_short(v)}" for k, v in args.items()), 80)


def _text_of(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return json.dumps(content, default=str)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return _clip(text, 60)


def _clip(text: str, n: int = WIDTH) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[:n - 1] + "…"


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())
