"""`Record`: the base of the board's data (tasks, leases, usage, budgets, todos).

A msgspec ``Struct``, used through msgspec's own API (``msgspec.structs.replace``,
``msgspec.to_builtins``, ...). msgspec imports in a few milliseconds and decodes and checks
50,000 task files in a fraction of a second, where pydantic costs 0.2 s of every command's
start before any work (issue 21). Settings (`orchestrator.config`) stay pydantic models:
only commands that change or run things load them.

The few functions here keep what msgspec's own calls would not:

- `convert` and `decode` (and `decode_list`) check every field's type and constraints and
  reject unknown fields in lax mode (``"5"`` is taken for an int), and turn a too-deep
  document into `InvalidRecord` rather than a ``RecursionError``;
- `to_dict` and `to_json` give every field of a class declared with ``omit_defaults``
  (`orchestrator.model.Task`), which msgspec's encoders would leave out at their defaults.

Each class's ``__post_init__`` checks the values the types cannot say, and runs on
construction and on ``msgspec.structs.replace`` too. A failure is `InvalidRecord` (a
``ValueError``), one line with the path of the bad field.
"""

from __future__ import annotations

import gc
import re
from typing import Any, TypeVar

import msgspec

InvalidRecord = msgspec.ValidationError
"""What decoding a bad record raises (a subclass of ``ValueError``)."""

TOO_DEEP = "nested too deeply"

R = TypeVar("R", bound="Record")

_ENCODER = msgspec.json.Encoder()


class Record(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A checked record; see the module's text."""


def convert(data: Any, cls: type[R]) -> R:
    """``data`` (plain values, or already a ``cls``) as a checked ``cls``."""
    try:
        return msgspec.convert(data, cls, strict=False)
    except RecursionError:
        raise InvalidRecord(TOO_DEEP) from None


def decode(data: str | bytes, cls: type[R]) -> R:
    """A JSON document as a checked ``cls``."""
    try:
        return msgspec.json.decode(data, type=cls, strict=False)
    except RecursionError:
        raise InvalidRecord(TOO_DEEP) from None


def to_dict(record: Record) -> dict[str, Any]:
    """The record as plain values (enums as their values, nested records as dicts), every
    field."""
    out: dict[str, Any] = msgspec.to_builtins(full(record))
    return out


def to_json(record: Record, *, indent: int = 0) -> str:
    """The record as JSON text with every field."""
    raw = _ENCODER.encode(full(record))
    return (msgspec.json.format(raw, indent=indent) if indent else raw).decode()


def full(record: Record) -> Record | dict[str, Any]:
    """What encodes as every field of ``record``: a class declared with ``omit_defaults``
    (`orchestrator.model.Task`: its copy in the index is a third of the size) leaves fields at
    their defaults out of its own encoding, but every output has them all."""
    if record.__struct_config__.omit_defaults:
        return msgspec.structs.asdict(record)
    return record


def describe_error(exc: Exception) -> str:
    """One line for a decoding error (a record's, or pydantic's for settings and MCP
    arguments), naming the field: ``priority: expected int, got str``."""
    text = str(exc)
    if isinstance(exc, InvalidRecord):
        m = re.match(r"(?s)(.*) - at `\$\.?(.*)`$", text)
        if m:
            where = re.sub(r"\[(\d+)\]", r".\1", m.group(2)) or "file"
            what = m.group(1).replace("`", "")
            return f"{where}: {what[:1].lower()}{what[1:]}"
        return text.replace("`", "")
    errors = getattr(exc, "errors", None)
    if type(exc).__module__.startswith("pydantic") and callable(errors):
        err = errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "file"
        return f"{where}: {err['msg']}"
    return text


def decode_list(data: str | bytes | memoryview, cls: type[R]) -> list[R]:
    """A JSON array of ``cls`` records, checked like `decode`.

    The cycle collector is paused meanwhile: decoding makes millions of objects (none of
    them in a cycle), and its passes over them took half the time of a 50,000-task
    snapshot."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return msgspec.json.decode(data, type=list[cls], strict=False)  # type: ignore[valid-type]
    except RecursionError:
        raise InvalidRecord(TOO_DEEP) from None
    finally:
        if paused:
            gc.enable()
