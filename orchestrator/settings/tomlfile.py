"""Set or remove one key of a TOML file, leaving every other line as it was.

tomllib only reads, and a settings change must not reformat the user's file or
drop its comments, so this edits lines: the key's line (with a multi-line
array or string, all its lines) is replaced, a new key goes after the last
key of its table, a new table at the end. The result is parsed again and must
hold exactly the intended value, else `ConfigError` and nothing is written
(a key set as a dotted key or an inline table is left to the user).
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from typing import Any

from orchestrator.errors import ConfigError

_HEADER = re.compile(r"^\s*\[(?!\[)\s*([^\]]+?)\s*\]\s*(?:#.*)?$")
_ANY_HEADER = re.compile(r"^\s*\[")
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def dumps_value(value: Any) -> str:
    """``value`` as a TOML value (strings, numbers, booleans, arrays, inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(dumps_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {dumps_value(v)}" for k, v in value.items()) + "}"
    raise ConfigError(f"cannot write {type(value).__name__} values to TOML")


def _key(k: str) -> str:
    return k if _BARE_KEY.match(k) else json.dumps(k)


def _header_name(line: str) -> str | None:
    m = _HEADER.match(line)
    if not m:
        return None
    return ".".join(part.strip().strip('"') for part in m.group(1).split("."))


def _table_span(lines: list[str], table: str) -> tuple[int, int] | None:
    """(first line after the header, end) of ``[table]``, or None if it has no header."""
    for i, line in enumerate(lines):
        if _header_name(line) == table:
            end = next((j for j in range(i + 1, len(lines)) if _ANY_HEADER.match(lines[j])),
                       len(lines))
            return i + 1, end
    return None


def _key_span(lines: list[str], start: int, end: int, key: str) -> tuple[int, int] | None:
    """Lines [i, j) holding ``key = value`` inside a table (multi-line values included)."""
    pattern = re.compile(rf"^\s*(?:{re.escape(key)}|\"{re.escape(key)}\")\s*=")
    for i in range(start, end):
        if pattern.match(lines[i]):
            for j in range(i + 1, end + 1):
                try:
                    tomllib.loads("".join(lines[i:j]))
                    return i, j
                except tomllib.TOMLDecodeError:
                    continue
            return i, i + 1
    return None


def _trailing_comment(line: str) -> str:
    """`` # comment`` at the end of a one-line ``key = value``, or ""."""
    for pos, ch in enumerate(line):
        if ch == "#":
            try:
                tomllib.loads(line[:pos])
            except tomllib.TOMLDecodeError:
                continue
            return "  " + line[pos:].rstrip("\n")
    return ""


def _lookup(data: dict[str, Any], path: list[str]) -> tuple[bool, Any]:
    cur: Any = data
    for part in path:
        if not isinstance(cur, dict) or part not in cur:
            return False, None
        cur = cur[part]
    return True, cur


def edit(text: str, table: str, key: str, value: Any, *, remove: bool = False) -> str:
    """``text`` with ``[table] key = value`` set (or the key removed with ``remove``)."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    new_line = "" if remove else f"{_key(key)} = {dumps_value(value)}\n"
    span = _table_span(lines, table)
    if span is None:
        if not remove:
            sep = "\n" if lines and lines[-1].strip() else ""
            lines += [sep, f"[{table}]\n", new_line]
    else:
        start, end = span
        found = _key_span(lines, start, end, key)
        if found is not None:
            i, j = found
            if new_line and j == i + 1:
                new_line = new_line[:-1] + _trailing_comment(lines[i]) + "\n"
            lines[i:j] = [new_line] if new_line else []
        elif not remove:
            last = max((i for i in range(start, end)
                        if lines[i].strip() and not lines[i].lstrip().startswith("#")),
                       default=start - 1)
            lines.insert(last + 1, new_line)
    out = "".join(lines)
    _check(out, [*table.split("."), key], value, remove)
    return out


def _check(text: str, path: list[str], value: Any, remove: bool) -> None:
    where = ".".join(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"cannot edit {where} safely ({exc}); edit the file by hand") from exc
    present, got = _lookup(data, path)
    if remove and present:
        raise ConfigError(f"cannot remove {where} safely (it is not a plain `key = value` "
                          "line of its table); edit the file by hand")
    if not remove and (not present or got != value):
        raise ConfigError(f"cannot set {where} safely (it is written as a dotted key or an "
                          "inline table); edit the file by hand")
