"""The one permission gate every tool call goes through, native or MCP.

Rules use Claude Code's syntax::

    Bash                    every shell command
    Bash(npm test:*)        commands starting with the words ``npm test``
    Bash(git diff)          exactly that command   (``*`` inside is a wildcard)
    Read(./.env)            gitignore-style path globs, relative to the worktree;
    Edit(src/**)            ``//abs`` is absolute, ``~/`` the home folder, a pattern
                            without '/' matches a name at any depth
    WebFetch(domain:x.com)  a host and its subdomains
    mcp__server__tool, mcp__server__*, mcp__server      MCP tools

``Edit`` covers every file-writing tool (write, edit, multi_edit), ``Read`` every
file-reading one (read, glob, grep, ls); other names match a tool by name,
ignoring case and underscores (``MultiEdit`` = ``multi_edit``). A path rule also
covers what lies below a folder it matches, and paths are compared after
symlinks are resolved, so a link cannot dodge a deny rule.

Evaluation: deny → ask → allow, then the mode. ``bypassPermissions`` allows
what no rule decided (deny and ask rules still apply); ``plan`` denies every
tool that is not read-only, whatever the allow rules say; ``acceptEdits``
allows file edits and read-only tools; ``default`` allows read-only tools and
asks for the rest — except bash while the sandbox confines it
(``auto_allow_sandboxed_bash``, on by default). A tool marked
``needs_allow_rule`` (``web_fetch``) is denied in every mode but
``bypassPermissions`` unless an allow or ask rule matches it.
A compound shell command (``a && b``, ``a; b``, ``a | b``) is allowed by rules
only when every part is; any part hitting a deny or ask rule decides for the
whole. Parts holding command substitution (``$(…)``, backticks)
are never allowed by a rule with a specifier. Prefix rules on shell commands
are a convenience, not a wall (``bash -c``, quoting and aliases can dodge
them): the sandbox is what keeps writes inside the worktree.

Sources, merged: ``orchestrator.toml`` (``[agent] allow/ask/deny/permission_mode``),
then the project's ``.claude/settings.json`` and ``.claude/settings.local.json``
(``{"permissions": {"allow": [], "ask": [], "deny": [], "defaultMode": …}}``).
The mode set in ``orchestrator.toml`` (or ``ORCH_AGENT_PERMISSION_MODE``) wins over
``defaultMode``; the user's own ``~/.claude/settings.json`` is not read, as a
headless team should not inherit what someone allowed interactively.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from orchestrator.agent.base import Tool
from orchestrator.agent.paths import glob_regex
from orchestrator.config import AgentConfig
from orchestrator.errors import ConfigError

Behavior = Literal["allow", "ask", "deny"]
MODES = ("default", "acceptEdits", "plan", "bypassPermissions")
SETTINGS_FILES = (".claude/settings.json", ".claude/settings.local.json")

_RULE_RE = re.compile(r"^([A-Za-z0-9_*-]+)(?:\((.*)\))?$", re.DOTALL)
_ENV_PREFIX_RE = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)+")
_SUBSTITUTION = ("$(", "`", "<(", ">(")


def _norm(name: str) -> str:
    return name.replace("_", "").lower()


def edits_files(tool: Tool) -> bool:
    return bool(getattr(tool, "edits_files", False))


def reads_files(tool: Tool) -> bool:
    return tool.read_only and getattr(tool, "path_arg", None) is not None


@dataclass(frozen=True)
class Decision:
    behavior: Behavior
    rule: str | None
    """The rule that decided, as written; None when the mode decided."""
    reason: str


@dataclass(frozen=True)
class Rule:
    behavior: Behavior
    tool: str
    specifier: str | None
    source: str
    text: str

    @classmethod
    def parse(cls, text: str, behavior: Behavior, source: str) -> Rule:
        m = _RULE_RE.match(text.strip()) if isinstance(text, str) else None
        if not m or (m.group(2) is not None and not m.group(2).strip()):
            raise ConfigError(
                f"{source}: bad {behavior} rule {text!r} "
                "(expected Tool or Tool(specifier), e.g. Bash(npm test:*), Edit(src/**))"
            )
        return cls(behavior, m.group(1), m.group(2), source, text.strip())

    def covers(self, tool: Tool) -> bool:
        """Whether the rule's tool name names ``tool`` (the specifier is not looked at)."""
        if self.tool.startswith("mcp__"):
            if self.tool.endswith("__*"):
                return tool.name.startswith(self.tool[:-1])
            return tool.name == self.tool or tool.name.startswith(self.tool + "__")
        if self.tool == "*":
            return True
        want = _norm(self.tool)
        if want == "edit" and edits_files(tool):
            return True
        if want == "read" and reads_files(tool):
            return True
        return want == _norm(tool.name)


class PermissionGate:
    def __init__(self, rules: Iterable[Rule] = (), mode: str = "default",
                 root: Path | None = None, *, sandboxed_bash: bool = False) -> None:
        if mode not in MODES:
            raise ConfigError(f"unknown permission mode {mode!r} (choose from: {', '.join(MODES)})")
        self.rules = list(rules)
        self.mode = mode
        self.root = (root or Path.cwd()).resolve()
        self.sandboxed_bash = sandboxed_bash
        """Bash is confined by the sandbox, so an unmatched command runs without asking."""

    @classmethod
    def from_rules(cls, *, allow: Iterable[str] = (), ask: Iterable[str] = (),
                   deny: Iterable[str] = (), mode: str = "default", root: Path | None = None,
                   source: str = "rules") -> PermissionGate:
        return cls(_parse_lists({"allow": allow, "ask": ask, "deny": deny}, source), mode, root)

    @classmethod
    def from_sources(cls, agent: AgentConfig, project_root: Path,
                     worktree: Path | None = None, *, sandboxed: bool = False) -> PermissionGate:
        """Rules from the config and the project's ``.claude/settings*.json``; path rules
        are relative to ``worktree`` (default: the project root). ``sandboxed``: bash runs
        under the sandbox, so `AgentConfig.auto_allow_sandboxed_bash` may apply."""
        rules = _parse_lists(
            {"allow": agent.allow, "ask": agent.ask, "deny": agent.deny}, "orchestrator.toml"
        )
        mode = agent.permission_mode
        settings_mode: str | None = None
        for name in SETTINGS_FILES:
            perms = _read_settings(project_root / name)
            rules += _parse_lists({b: perms.get(b, []) for b in ("allow", "ask", "deny")}, name)
            if isinstance(perms.get("defaultMode"), str):
                settings_mode = perms["defaultMode"]
        if settings_mode is not None and "permission_mode" not in agent.model_fields_set:
            mode = settings_mode  # type: ignore[assignment]  # an unknown mode fails below
        return cls(rules, mode, worktree or project_root,
                   sandboxed_bash=sandboxed and agent.auto_allow_sandboxed_bash)

    def check(self, tool: Tool, args: dict[str, Any]) -> Decision:
        subject = tool.permission_subject(args)
        for behavior in ("deny", "ask"):
            for rule in self._rules(behavior, tool):
                if self._matches_any_part(rule, tool, subject):
                    return Decision(behavior, rule.text, f"{behavior} rule {rule.text} "
                                    f"({rule.source})")
        if self.mode == "plan" and not tool.read_only:
            return Decision("deny", None, "plan mode is read-only")
        allow = list(self._rules("allow", tool))
        if allow and self._allowed_by(allow, tool, subject):
            texts = ", ".join(r.text for r in allow if self._matches_any_part(r, tool, subject))
            return Decision("allow", texts, f"allow rule {texts}")
        if self.mode == "bypassPermissions":
            return Decision("allow", None, "bypassPermissions mode")
        if getattr(tool, "needs_allow_rule", False):
            return Decision("deny", None, f"{tool.name} is off unless an allow rule matches it")
        if tool.read_only:
            return Decision("allow", None, "read-only tool")
        if self.mode == "acceptEdits" and edits_files(tool):
            return Decision("allow", None, "acceptEdits mode allows file edits")
        if self.sandboxed_bash and tool.name == "bash":
            return Decision("allow", None, "bash runs inside the sandbox")
        return Decision("ask", None, f"{self.mode} mode asks before {tool.name}")

    def denies_read(self, path: Path) -> bool:
        """Whether a deny rule on reading covers ``path`` (search tools skip such files)."""
        return any(
            r.behavior == "deny" and _norm(r.tool) == "read"
            and (r.specifier is None or self._path_matches(r.specifier, path))
            for r in self.rules
        )

    # --- matching -------------------------------------------------------------

    def _rules(self, behavior: str, tool: Tool) -> Iterable[Rule]:
        return (r for r in self.rules if r.behavior == behavior and r.covers(tool))

    def _allowed_by(self, rules: list[Rule], tool: Tool, subject: str | None) -> bool:
        if any(r.specifier is None or r.specifier == "*" for r in rules):
            return True
        if tool.name != "bash":
            return any(self._matches(r, tool, subject) for r in rules)
        parts = split_command(subject or "")
        return bool(parts) and all(
            not any(s in part for s in _SUBSTITUTION)
            and any(_command_matches(r.specifier or "", part) for r in rules)
            for part in parts
        )

    def _matches_any_part(self, rule: Rule, tool: Tool, subject: str | None) -> bool:
        if rule.specifier is None or rule.specifier == "*":
            return True
        if tool.name == "bash":
            return any(_command_matches(rule.specifier, p) for p in split_command(subject or ""))
        return self._matches(rule, tool, subject)

    def _matches(self, rule: Rule, tool: Tool, subject: str | None) -> bool:
        spec = rule.specifier
        if spec is None or spec == "*":
            return True
        if subject is None:
            return False
        if getattr(tool, "path_arg", None) is not None:
            return self._path_matches(spec, (self.root / subject).resolve())
        if spec.startswith("domain:"):
            host = urlsplit(subject if "//" in subject else f"//{subject}").hostname or ""
            want = spec[len("domain:"):].lower()
            return host == want or host.endswith("." + want)
        return fnmatch.fnmatchcase(subject, spec)

    def _path_matches(self, spec: str, target: Path) -> bool:
        pattern = spec.rstrip("/") or "/"
        if pattern.startswith("//"):
            base, pattern = Path("/"), pattern[2:]
        elif pattern.startswith("~/"):
            base, pattern = Path.home().resolve(), pattern[2:]
        elif pattern.startswith("./"):
            base, pattern = self.root, pattern[2:]
        elif "/" in pattern:
            base, pattern = self.root, pattern.lstrip("/")
        else:
            return any(glob_regex(pattern).match(p.name) for p in _self_and_parents(target,
                                                                                      self.root))
        regex = glob_regex(pattern)
        return any(
            p.is_relative_to(base) and regex.match(p.relative_to(base).as_posix())
            for p in _self_and_parents(target, base)
        )


def _self_and_parents(path: Path, stop: Path) -> list[Path]:
    """``path`` and its parents below ``stop`` (or all of them when not under it)."""
    out = [path]
    for parent in path.parents:
        if parent == stop:
            break
        out.append(parent)
    return out


def split_command(command: str) -> list[str]:
    """The simple commands of a shell line, split on ``&&``, ``||``, ``;``, ``|``, ``&``
    and newlines outside quotes; leading ``VAR=value`` assignments and subshell
    parentheses are dropped so rules see the command itself."""
    parts: list[str] = []
    cur: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(command):
        c = command[i]
        if quote:
            cur.append(c)
            if c == "\\" and quote == '"' and i + 1 < len(command):
                cur.append(command[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif c == "\\" and i + 1 < len(command):
            cur.append(command[i : i + 2])
            i += 1
        elif c in "'\"":
            quote = c
            cur.append(c)
        elif c in ";|&\n" and not _is_redirect(command, i):
            parts.append("".join(cur))
            cur = []
            if command.startswith(("&&", "||", ";;"), i):
                i += 1
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    out = []
    for part in parts:
        part = part.strip().lstrip("({").rstrip(")}").strip()
        part = _ENV_PREFIX_RE.sub("", part)
        if part:
            out.append(" ".join(part.split()))
    return out


def _is_redirect(command: str, i: int) -> bool:
    """``&`` in ``2>&1``, ``&>`` or ``>&`` is a redirection, not a separator."""
    return command[i] == "&" and (
        (i > 0 and command[i - 1] in "<>") or command.startswith("&>", i)
    )


def _command_matches(spec: str, command: str) -> bool:
    spec = " ".join(spec.split())
    if spec.endswith(":*"):
        prefix = spec[:-2].rstrip()
        return not prefix or command == prefix or command.startswith(prefix + " ")
    if "*" in spec:
        regex = ".*".join(re.escape(s) for s in spec.split("*"))
        return re.fullmatch(regex, command, re.DOTALL) is not None
    return command == spec


def _parse_lists(lists: dict[str, Iterable[str]], source: str) -> list[Rule]:
    rules: list[Rule] = []
    for behavior, texts in lists.items():
        if not isinstance(texts, list | tuple):
            raise ConfigError(f"{source}: permissions.{behavior} must be a list of rules")
        rules += [Rule.parse(t, behavior, source) for t in texts]  # type: ignore[arg-type]
    return rules


def _read_settings(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    perms = data.get("permissions", {}) if isinstance(data, dict) else None
    if not isinstance(perms, dict):
        raise ConfigError(f"{path}: \"permissions\" must be an object")
    return perms
