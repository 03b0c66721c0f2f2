"""Agent profiles: which kind of agent works on a task (``orchestrator add --agent NAME``).

Two sources, Claude Code's subagent files first, then the project's settings:

- ``.claude/agents/<name>.md``: front matter (`orchestrator.frontmatter`: ``name``, ``description``,
  ``tools`` as a comma list or a list, ``model``, ``permissionMode``,
  ``maxTurns``; other keys such as ``color`` are ignored) and the body as the
  system prompt;
- ``[agents.<name>]`` in orchestrator.toml (`orchestrator.config.ProfileConfig`):
  a profile of its own, or, for a name that also has a file, the fields it
  sets override the file's.

The user's own ``~/.claude/agents`` is not read: a team runs what the project
declares. A profile changes a run of the ``anthropic``/``scripted`` backends:
its ``model``, ``permissionMode`` and ``maxTurns`` replace ``[agent]``'s, only
its ``tools`` are offered (by Claude Code's names or ours; ``mcp__server__*``
patterns; all when it lists none), and its prompt is added to the system
prompt's stable part. Model aliases (``sonnet``, ``opus``, ``haiku``) become
model ids; ``inherit`` keeps ``agent.model``. A broken file only fails the
tasks that name it, with the file and the reason.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from orchestrator import frontmatter
from orchestrator.config import Config, ProfileConfig
from orchestrator.errors import ConfigError, InvalidInput
from orchestrator.fsutil import read_regular

if TYPE_CHECKING:
    from orchestrator.agent.prompt import Prompt

AGENTS_DIR = ".claude/agents"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
FRONT_MATTER_KEYS = {"name", "description", "tools", "model", "permissionMode", "maxTurns"}
MODEL_ALIASES = {"sonnet": "claude-sonnet-4-5", "opus": "claude-opus-4-1",
                 "haiku": "claude-haiku-4-5", "inherit": None}
TOOL_ALIASES = {"task": "agent"}
"""Claude Code tool names whose tool here has another name (``Task`` runs sub-agents)."""
ALWAYS_OFFERED = ("submit_plan",)
"""Tools the run needs whatever the profile lists (plan-first tasks submit their plan)."""


@dataclass(frozen=True)
class Profile:
    name: str
    settings: ProfileConfig
    source: str
    """The file it comes from, or ``orchestrator.toml``."""

    @property
    def model(self) -> str | None:
        m = self.settings.model
        return MODEL_ALIASES.get(m.lower(), m) if m else None

    def config_for(self, config: Config) -> Config:
        """``config`` with this profile's model, permission mode and turn budget."""
        s = self.settings
        update: dict[str, Any] = {k: v for k, v in (
            ("model", self.model), ("permission_mode", s.permission_mode),
            ("max_turns", s.max_turns)) if v is not None}
        if not update:
            return config
        agent = config.agent.model_copy(update=update)
        return config.model_copy(update={"agent": agent})

    def offers(self, tool: str) -> bool:
        """Whether a tool of this name is offered to the model under this profile."""
        if self.settings.tools is None or tool in ALWAYS_OFFERED:
            return True
        return any(_matches(want, tool) for want in self.settings.tools)

    def shape_prompt(self, prompt: Prompt) -> Prompt:
        """The prompt with this profile's role added at the end of the stable part."""
        body = self.settings.prompt.strip()
        if not body:
            return prompt
        role = f"# Your role: the {self.name} agent\n{body}"
        first = {**prompt.system[0], "text": f"{prompt.system[0]['text']}\n\n{role}"}
        return dataclasses.replace(prompt, system=[first, *prompt.system[1:]])

    def to_dict(self) -> dict[str, Any]:
        s = self.settings
        return {"name": self.name, "description": s.description, "tools": s.tools,
                "model": self.model, "permission_mode": s.permission_mode,
                "max_turns": s.max_turns, "source": self.source}


@dataclass
class Profiles:
    found: dict[str, Profile] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)
    """Name (the file's stem) -> why its file cannot be used."""

    def get(self, name: str) -> Profile:
        if name in self.found:
            return self.found[name]
        if name in self.broken:
            raise ConfigError(f"agent profile {name!r} is broken: {self.broken[name]}")
        known = ", ".join(sorted(self.found)) or "none defined"
        raise ConfigError(f"unknown agent profile {name!r} (profiles: {known}; "
                          f"define one in {AGENTS_DIR}/{name}.md or [agents.{name}])")

    @property
    def names(self) -> list[str]:
        return sorted({*self.found, *self.broken})


def load_profiles(root: Path, config: Config) -> Profiles:
    out = Profiles()
    files: dict[str, dict[str, Any]] = {}
    folder = root / AGENTS_DIR
    for path in sorted(folder.glob("*.md")) if folder.is_dir() else []:
        shown = f"{AGENTS_DIR}/{path.name}"
        try:
            data = parse_agent_file(read_regular(path), shown)
            name = str(data.get("name") or path.stem)
            _check_name(name, shown)
        except (ConfigError, OSError, UnicodeDecodeError) as exc:
            out.broken[path.stem] = str(exc)
            continue
        files[name] = {**data, "name": name, "_source": shown}
    for name in sorted({*files, *config.agents}):
        base = {k: v for k, v in files.get(name, {}).items() if k not in ("name", "_source")}
        over = config.agents[name].model_dump(exclude_unset=True) if name in config.agents else {}
        source = files[name]["_source"] if name in files else "orchestrator.toml"
        try:
            _check_name(name, source)
            settings = ProfileConfig.model_validate({**base, **over})
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            out.broken[name] = f"{source}: {where}: {err['msg']}"
            continue
        except ConfigError as exc:
            out.broken[name] = str(exc)
            continue
        out.broken.pop(name, None)
        out.found[name] = Profile(name, settings, source)
    return out


def resolve(root: Path, config: Config, name: str | None) -> tuple[Config, Profile | None]:
    """The run's config and profile for a task naming ``name`` (None: no profile)."""
    if not name:
        return config, None
    profile = load_profiles(root, config).get(name)
    return profile.config_for(config), profile


def check_task_profile(root: Path, config: Config, name: str) -> None:
    """For ``add --agent NAME``: a `ConfigError` unless ``name`` is a profile defined now
    (the error lists the ones there are), so a typo is refused when given, not at run time."""
    if not NAME_RE.match(name) or ".." in name:
        raise ConfigError(f"not an agent profile name: {name!r} (letters, digits, . _ -)")
    load_profiles(root, config).get(name)


def restrict(toolset: Any, profile: Profile | None) -> list[str]:
    """Take the tools the profile does not list out of the run's toolset; their names."""
    if profile is None:
        return []
    return list(toolset.keep(profile.offers))


def _matches(want: str, tool: str) -> bool:
    want = want.strip()
    if want.startswith("mcp__"):
        if want.endswith("*"):
            return tool.startswith(want[:-1])
        return tool == want or tool.startswith(want + "__")
    norm = want.replace("_", "").lower()
    return TOOL_ALIASES.get(norm, norm) == tool.replace("_", "").lower()


def _check_name(name: str, source: str) -> None:
    if not NAME_RE.match(name):
        raise ConfigError(f"{source}: bad agent name {name!r} "
                          "(letters, digits, '.', '_', '-'; at most 64)")


def parse_agent_file(text: str, where: str) -> dict[str, Any]:
    """Front matter fields (with ``prompt`` = the body) of an agent Markdown file."""
    try:
        head, body = frontmatter.split(text)
        if head is None:
            raise InvalidInput("no front matter (the file must start with a '---' line)")
        data = frontmatter.parse(head)
    except InvalidInput as exc:
        raise ConfigError(f"{where}: {exc}") from None
    data = {k: v for k, v in data.items() if k in FRONT_MATTER_KEYS}
    data["prompt"] = "\n".join(body).strip()
    return data
