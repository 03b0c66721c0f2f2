"""Front matter, the ``---`` block atop a Markdown file: the one parser of dropped task
files (`orchestrator.board.intake`) and agent profiles (``.claude/agents/*.md``).

The YAML subset those files use: ``key: value`` lines whose value is a plain scalar
(whole numbers, ``true``/``false``; nothing, ``~`` or ``null`` is None), a quoted string,
``[a, b]``, a block list (``- item`` lines below the key), a ``|``/``>`` block, or a
scalar continued on indented lines. A comment is a line starting with ``#`` or `` # ``
in a value: ``subject: fix #123`` keeps its ``#123``. No anchors, aliases, tags or
nesting, one pass, no backtracking regex: a hostile file cannot expand, nest or hang
it. Errors are `InvalidInput` naming the line (the ``---`` line is line 1).
"""

from __future__ import annotations

import json
import re
from typing import Any

from orchestrator.errors import InvalidInput

FENCE = "---"
KEY_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)[ \t]*:[ \t]*(.*)")
BLOCKS = ("|", ">", "|-", ">-")


def split(text: str) -> tuple[list[str] | None, list[str]]:
    """The front matter's lines (None when ``text`` has none) and the lines after it."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != FENCE:
        return None, lines
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == FENCE), None)
    if end is None:
        raise InvalidInput(f"the front matter opened with '{FENCE}' is never closed")
    return lines[1:end], lines[end + 1:]


def parse(lines: list[str]) -> dict[str, Any]:
    """The fields of the front matter's ``lines`` (those `split` returns)."""
    data: dict[str, Any] = {}
    key: str | None = None
    block: list[str] | None = None
    fold: list[str] | None = None  # a plain scalar folded over lines, joined at its end
    for n, raw in enumerate(lines, start=2):
        if not raw.strip() or raw.lstrip().startswith("#"):
            if block is not None:
                block.append("")
            continue
        if raw[0] in " \t" and key is not None:
            item = raw.strip()
            if block is not None:
                block.append(item)
            elif item.startswith("- ") or item == "-":
                fold = None
                items = data[key]
                if not isinstance(items, list):
                    items = data[key] = []
                items.append(_scalar(item[2:], n))  # in place: a copy per item was quadratic
            else:  # a plain scalar folded over lines
                if fold is None:
                    fold = [str(data[key])] if data[key] else []
                if item := _uncomment(item):
                    fold.append(item)
            continue
        m = KEY_RE.fullmatch(raw.rstrip())
        if not m:
            raise InvalidInput(f"line {n}: expected 'key: value', got {_cut(raw.strip())!r}")
        _close(data, key, block, fold)
        fold = None
        key, value = m.group(1), m.group(2).strip()
        block = [] if value in BLOCKS else None
        data[key] = "" if block is not None else _value(value, n)
    _close(data, key, block, fold)
    return data


def _close(data: dict[str, Any], key: str | None, block: list[str] | None,
           fold: list[str] | None) -> None:
    if key is not None and block is not None:
        data[key] = "\n".join(block).strip()
    elif key is not None and fold is not None:
        data[key] = " ".join(fold)


def _value(value: str, n: int) -> Any:
    if not value.startswith("["):
        return _scalar(value, n)
    value = _uncomment(value)
    if not value.endswith("]"):
        raise InvalidInput(f"line {n}: a list must close on the same line: {_cut(value)!r}")
    items = [v.strip() for v in value[1:-1].split(",")]
    if any(v.startswith("[") for v in items):
        raise InvalidInput(f"line {n}: a list inside a list (front matter lists hold "
                           "plain values)")
    return [_scalar(v, n) for v in items if v]


def _scalar(value: str, n: int) -> Any:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        if value[0] == "'":
            return value[1:-1].replace("''", "'")
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise InvalidInput(f"line {n}: bad quoted string {_cut(value)!r}") from None
    value = _uncomment(value)
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    if value in ("", "~", "null"):
        return None
    if re.fullmatch(r"-?\d{1,18}", value):
        return int(value)
    return value


def _uncomment(value: str) -> str:
    """``value`` without a trailing comment: `` # `` (or a final `` #``) and what follows."""
    at = value.find("#")
    while at != -1:
        if at > 0 and value[at - 1] in " \t" and value[at + 1:at + 2] in ("", " ", "\t"):
            return value[:at].rstrip()
        at = value.find("#", at + 1)
    return value


def _cut(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else f"{text[:limit]}..."
