"""The settings registry: every setting, declared once in `orchestrator.config`.

A `Setting` is read off the config models — its type, default, constraints
(``Literal`` choices, ``ge``/``le``…) and the field's docstring as its
description — plus metadata: ``scope`` (``project``: the repository's
orchestrator.toml; ``user``: ``~/.config/orchestrator/config.toml``), ``live``
(a running daemon applies it without a restart) and ``agent_writable`` (the
agents' ``config`` tool may change it, after a person approves). Sections set
``LIVE``/``SCOPE`` for all their fields; a field's ``json_schema_extra`` may
override them.

`Registry` validates values for ``orchestrator config`` and the config tool and
writes them into the right file; unknown keys and bad values are a
`ConfigError` that says what is allowed. Tables (``hooks.events``,
``commands.cli``) are listed but edited in the file.
"""

from __future__ import annotations

import difflib
import os
import tomllib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import annotated_types as at
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from orchestrator.backend_names import BACKENDS
from orchestrator.config import Config, first_problem, user_config_file
from orchestrator.errors import ConfigError
from orchestrator.fsutil import atomic_write
from orchestrator.settings import Scope, tomlfile

PROJECT_FILE = "orchestrator.toml"
NOT_SETTINGS = ("agents",)
"""Config fields that are not sections of settings (profiles have their own module)."""
NONE_WORDS = ("none", "null")
_INVALID = object()


DYNAMIC_CHOICES: dict[str, typing.Callable[[], list[str]]] = {
    "team.backend": lambda: sorted(BACKENDS)}
"""Settings typed ``str`` in the config whose values come from a registry elsewhere."""


@dataclass(frozen=True)
class Setting:
    key: str
    section: str
    name: str
    annotation: Any
    field: FieldInfo
    description: str
    allowed: str
    scope: str
    live: bool
    agent_writable: bool
    table: bool
    """A table (a model or a mapping): shown, but set by editing the file."""
    choices: tuple[str, ...] = ()
    """Allowed values known only at run time (`DYNAMIC_CHOICES`)."""

    @property
    def default(self) -> Any:
        return self.field.get_default(call_default_factory=True)

    def validate(self, value: Any) -> Any:
        """``value`` checked and converted, or a `ConfigError` saying what is allowed."""
        tp: Any = Annotated[self.annotation, *self.field.metadata] if self.field.metadata \
            else self.annotation
        try:
            checked = TypeAdapter(tp).validate_python(value)
        except ValidationError:
            checked = _INVALID
        if checked is _INVALID or (self.choices and checked is not None
                                   and checked not in self.choices):
            raise ConfigError(f"{self.key}: {value!r} is not allowed "
                              f"(allowed: {self.allowed})")
        return checked

    def parse(self, raw: str) -> Any:
        """A value typed on the command line, checked: TOML for arrays and tables,
        ``none`` for an optional setting, the text itself for everything else."""
        if _allows_none(self.annotation) and raw.strip().lower() in NONE_WORDS:
            return None
        value: Any = raw
        if _is_container(self.annotation):
            try:
                value = tomllib.loads(f"v = {raw}")["v"]
            except tomllib.TOMLDecodeError:
                value = [raw] if _origin_is(self.annotation, list) else raw
        return self.validate(value)

    def to_dict(self, value: Any = None, source: str | None = None) -> dict[str, Any]:
        out = {"key": self.key, "type": type_name(self.annotation), "default": _plain(self.default),
               "allowed": self.allowed, "description": self.description, "scope": self.scope,
               "live": self.live, "agent_writable": self.agent_writable}
        if source is not None:
            out.update(value=_plain(value), source=source)
        return out


class Registry:
    """All settings of `Config`, by key (``section.name``)."""

    def __init__(self, model: type[Config] = Config) -> None:
        self.settings: dict[str, Setting] = {}
        for section, sfield in model.model_fields.items():
            sub = sfield.annotation
            if section in NOT_SETTINGS or not (isinstance(sub, type)
                                                and issubclass(sub, BaseModel)):
                continue
            for name, f in sub.model_fields.items():
                extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
                key = f"{section}.{name}"
                choices = tuple(DYNAMIC_CHOICES[key]()) if key in DYNAMIC_CHOICES else ()
                self.settings[key] = Setting(
                    key=key, section=section, name=name, annotation=f.annotation, field=f,
                    description=" ".join((f.description or "").split()),
                    allowed=("one of " + ", ".join(choices)) if choices
                    else describe_allowed(f.annotation, f.metadata),
                    choices=choices,
                    scope=str(extra.get("scope", getattr(sub, "SCOPE", "project"))),
                    live=bool(extra.get("live", getattr(sub, "LIVE", False))),
                    agent_writable=bool(extra.get("agent_writable", False)),
                    table=_is_table(f.annotation),
                )

    def __iter__(self) -> typing.Iterator[Setting]:
        return iter(self.settings.values())

    def get(self, key: str) -> Setting:
        try:
            return self.settings[key]
        except KeyError:
            raise ConfigError(self._unknown(key)) from None

    def _unknown(self, key: str) -> str:
        section = key.partition(".")[0]
        names = [s.name for s in self if s.section == section]
        close = difflib.get_close_matches(key, list(self.settings), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        if names:
            return f"unknown setting {key!r}{hint} ({section} settings: {', '.join(names)})"
        sections = sorted({s.section for s in self})
        return f"unknown setting {key!r}{hint} (sections: {', '.join(sections)}; " \
               "`orchestrator config list` shows every key)"

    def writable(self, key: str, *, by_agent: bool = False) -> Setting:
        s = self.get(key)
        if s.table:
            raise ConfigError(f"{key} is a table: edit it in {PROJECT_FILE}")
        if by_agent and not s.agent_writable:
            allowed = ", ".join(x.key for x in self if x.agent_writable)
            raise ConfigError(f"{key} cannot be changed by an agent (agents may set: {allowed})")
        return s

    # --- values -------------------------------------------------------------------
    def value(self, config: Config, key: str) -> Any:
        s = self.get(key)
        return getattr(getattr(config, s.section), s.name)

    def source(self, root: Path, key: str, environ: typing.Mapping[str, str] | None = None
               ) -> str:
        """Where the value in force comes from: ``env``, ``project``, ``user`` or ``default``."""
        s = self.get(key)
        env = os.environ if environ is None else environ
        if f"ORCH_{s.section}_{s.name}".upper() in env:
            return "env"
        project = project_file(root)
        if _has(_read(project.path).get(project.prefix, {}) if project.prefix
                else _read(project.path), s):
            return "project"
        if _has(_read(user_config_file(env)), s):
            return "user"
        return "default"

    def set(self, root: Path, key: str, value: Any, *, scope: Scope | None = None,
            remove: bool = False, environ: typing.Mapping[str, str] | None = None) -> SetResult:
        """Write ``key = value`` (already validated) into the file of ``scope`` (default: the
        project's, whatever the setting's usual scope: a change is made where the person
        works unless they ask for their user file), after checking that the whole
        configuration still loads."""
        s = self.writable(key)
        where = scope or "project"
        target = project_file(root) if where == "project" else TomlTarget(
            user_config_file(environ), "")
        old_text = _read_text(target.path)
        try:
            tomllib.loads(old_text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"cannot read configuration {target.path}: {exc}; "
                              "fix the file first") from exc
        table = f"{target.prefix}.{s.section}" if target.prefix else s.section
        new_text = tomlfile.edit(old_text, table, s.name, value, remove=remove or value is None)
        env = os.environ if environ is None else environ
        _check_loads(root, target.path, new_text, env)
        if new_text != old_text:
            target.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target.path, new_text.encode())
        shadow = f"ORCH_{s.section}_{s.name}".upper()
        return SetResult(s, value, target.path, where,
                         shadowed_by=shadow if shadow in env else None,
                         changed=new_text != old_text)


@dataclass(frozen=True)
class SetResult:
    setting: Setting
    value: Any
    path: Path
    scope: str
    shadowed_by: str | None
    """An environment variable that wins over the file, when one is set."""
    changed: bool = True
    """Whether the file changed (unsetting a key that was not there changes nothing)."""

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.setting.key, "value": _plain(self.value), "file": str(self.path),
                "scope": self.scope, "live": self.setting.live, "shadowed_by": self.shadowed_by,
                "changed": self.changed}


@dataclass(frozen=True)
class TomlTarget:
    path: Path
    prefix: str
    """``tool.orchestrator`` when the settings live in pyproject.toml."""


def project_file(root: Path) -> TomlTarget:
    """orchestrator.toml, unless it does not exist and pyproject.toml holds the settings
    (``[tool.orchestrator]``): `Config.load` reads one or the other, never both."""
    own = root / PROJECT_FILE
    py = root / "pyproject.toml"
    if not own.exists() and py.exists():
        data = _read(py)
        if isinstance(data.get("tool"), dict) and "orchestrator" in data["tool"]:
            return TomlTarget(py, "tool.orchestrator")
    return TomlTarget(own, "")


def _check_loads(root: Path, path: Path, text: str, env: typing.Mapping[str, str]) -> None:
    """Refuse a change after which the configuration would not load (the file is untouched)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} would not parse: {exc}") from exc
    if path.name == "pyproject.toml":
        data = data.get("tool", {}).get("orchestrator", {})
    try:
        Config.model_validate(data)
    except ValidationError as exc:
        loc, msg = first_problem(exc)
        where = ".".join(str(p) for p in loc)
        raise ConfigError(f"{path} has a bad setting, fix it first: {where}: {msg}") \
            from None


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(_read_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"cannot read configuration {path}: {exc}") from exc


def _has(data: Any, s: Setting) -> bool:
    return isinstance(data, dict) and isinstance(data.get(s.section), dict) \
        and s.name in data[s.section]


# --- describing types ---------------------------------------------------------------

def _args(tp: Any) -> tuple[Any, ...]:
    return typing.get_args(tp)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _allows_none(tp: Any) -> bool:
    return _is_union(tp) and type(None) in _args(tp)


def _strip_none(tp: Any) -> Any:
    if _is_union(tp):
        rest = [a for a in _args(tp) if a is not type(None)]
        return rest[0] if len(rest) == 1 else tp
    return tp


def _origin_is(tp: Any, kind: type) -> bool:
    return typing.get_origin(_strip_none(tp)) is kind


def _is_table(tp: Any) -> bool:
    inner = _strip_none(tp)
    return _origin_is(tp, dict) or (isinstance(inner, type) and issubclass(inner, BaseModel))


def _is_container(tp: Any) -> bool:
    return _origin_is(tp, list) or _is_table(tp)


def type_name(tp: Any) -> str:
    inner = _strip_none(tp)
    opt = " | none" if _allows_none(tp) else ""
    if typing.get_origin(inner) is Literal:
        return "choice" + opt
    if typing.get_origin(inner) is list:
        return f"list[{type_name(_args(inner)[0])}]" + opt
    if _is_table(tp):
        return "table" + opt
    return getattr(inner, "__name__", str(inner)) + opt


def describe_allowed(tp: Any, metadata: list[Any]) -> str:
    """What a setting accepts, in words: choices, ranges, shapes."""
    inner = _strip_none(tp)
    origin = typing.get_origin(inner)
    if origin is Literal:
        text = "one of " + ", ".join(str(a) for a in _args(inner))
    elif inner is bool:
        text = "true or false"
    elif inner in (int, float):
        text = ("an integer" if inner is int else "a number") + _bounds(metadata)
    elif origin is list:
        text = 'a list of strings, e.g. ["a", "b"]'
        text = text + f" (at least {_min_len(metadata)})" if _min_len(metadata) else text
    elif _is_table(tp):
        text = "a table (edit it in the file)"
    else:
        text = "text"
    return text + (", or none" if _allows_none(tp) else "")


def _bounds(metadata: list[Any]) -> str:
    parts = []
    for m in metadata:
        for attr, word in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            bound = getattr(m, attr, None) if isinstance(m, at.BaseMetadata) else None
            if bound is not None:
                parts.append(f"{word} {bound}")
    return " " + " and ".join(parts) if parts else ""


def _min_len(metadata: list[Any]) -> int:
    return next((m.min_length for m in metadata if isinstance(m, at.MinLen)), 0)


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
