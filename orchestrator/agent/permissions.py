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
(``auto_allow_sandboxed_bash``, on by default). While no sandbox confines bash,
only a ``Bash(...)`` rule with a specifier allows a command, whatever the mode,
unless ``allow_unsandboxed_bash`` is set. A tool marked
``needs_allow_rule`` (``web_fetch``) is denied in every mode but
``bypassPermissions`` unless an allow or ask rule matches it.
A shell command is parsed (`orchestrator.agent.shell_parse`, tree-sitter-bash):
deny and ask rules hit when *any* command it runs matches them — every part of a
list or pipeline, substitutions, and the command inside wrappers (``bash -c``,
``env``, ``sudo``, ``xargs``, ``find -exec``, ``timeout``…), programs compared by
name (``/bin/rm`` is ``rm``). An allow rule must cover every command. What cannot
be known statically (an expansion in the command position, ``eval "$x"``,
``source``, a shell reading stdin, unparseable input) asks whenever a Bash deny
or ask rule exists that it could dodge (``plan`` denies it), and is never allowed
by a rule with a specifier. Rules see the command line, not what programs do with
their input (``python -c``, ``make``, a script file): the sandbox is the wall.

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
from orchestrator.agent.shell_parse import Analysis, Command, analyze, risky_name
from orchestrator.config import AgentConfig
from orchestrator.errors import ConfigError
from orchestrator.fsutil import read_regular

UNCONFINED = ("no sandbox confines bash (it could read every file and process of this "
              "user), so it asks; agent.allow_unsandboxed_bash = true lets the mode allow it")
Behavior = Literal["allow", "ask", "deny"]
MODES = ("default", "acceptEdits", "plan", "bypassPermissions")
SETTINGS_FILES = (".claude/settings.json", ".claude/settings.local.json")

_RULE_RE = re.compile(r"^([A-Za-z0-9_*-]+)(?:\((.*)\))?$", re.DOTALL)


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


PLAN_DENIES = Decision("deny", None, "plan mode is read-only")


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

    @property
    def bare(self) -> bool:
        """No specifier, or ``*``: the rule covers every use of its tools."""
        return self.specifier in (None, "*")

    def decision(self, detail: str = "") -> Decision:
        return Decision(self.behavior, self.text,
                        f"{self.behavior} rule {self.text} ({self.source}){detail}")

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
                 root: Path | None = None, *, sandboxed_bash: bool = False,
                 unconfined_bash: bool = False) -> None:
        if mode not in MODES:
            raise ConfigError(f"unknown permission mode {mode!r} (choose from: {', '.join(MODES)})")
        self.rules = list(rules)
        self.mode = mode
        self.root = (root or Path.cwd()).resolve()
        self.sandboxed_bash = sandboxed_bash
        """Bash is confined by the sandbox, so an unmatched command runs without asking."""
        self.unconfined_bash = unconfined_bash
        """No sandbox confines bash and the user did not opt in: neither the mode nor a bare
        ``Bash`` rule allows a command (a rule with a specifier still does)."""

    @classmethod
    def from_rules(cls, *, allow: Iterable[str] = (), ask: Iterable[str] = (),
                   deny: Iterable[str] = (), mode: str = "default", root: Path | None = None,
                   source: str = "rules") -> PermissionGate:
        return cls(_parse_lists({"allow": allow, "ask": ask, "deny": deny}, source), mode, root)

    @classmethod
    def from_sources(cls, agent: AgentConfig, project_root: Path,
                     worktree: Path | None = None, *, sandboxed: bool | None = None
                     ) -> PermissionGate:
        """Rules from the config and the project's ``.claude/settings*.json``; path rules
        are relative to ``worktree`` (default: the project root). ``sandboxed``: bash runs
        under the sandbox, so `AgentConfig.auto_allow_sandboxed_bash` may apply; False: it
        runs unconfined, so bash asks unless `AgentConfig.allow_unsandboxed_bash`."""
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
                   sandboxed_bash=bool(sandboxed) and agent.auto_allow_sandboxed_bash,
                   unconfined_bash=sandboxed is False and not agent.allow_unsandboxed_bash)

    def check(self, tool: Tool, args: dict[str, Any]) -> Decision:
        subject = tool.permission_subject(args)
        if tool.name == "bash":
            return self._check_bash(tool, subject or "")
        for behavior in ("deny", "ask"):
            for rule in self._rules(behavior, tool):
                if self._matches(rule, tool, subject):
                    return rule.decision()
        if self.mode == "plan" and not tool.read_only:
            return PLAN_DENIES
        allow = [r.text for r in self._rules("allow", tool) if self._matches(r, tool, subject)]
        return _allowed_by(allow) if allow else self._by_mode(tool)

    def _by_mode(self, tool: Tool) -> Decision:
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

    def _check_bash(self, tool: Tool, line: str) -> Decision:
        """Deny and ask rules hit when any command the line runs matches them (wrappers
        seen through, programs compared by name); plan mode denies the rest; what may
        match such a rule, or cannot be known statically while one exists (it could
        be dodged), asks; an allow rule must cover every command. See
        `orchestrator.agent.shell_parse` for what is seen."""
        analysis = analyze(line)
        guards = [r for r in self.rules if r.behavior != "allow" and r.covers(tool)]
        hit, maybe = _bash_hit(sorted(guards, key=lambda r: r.behavior != "deny"), analysis)
        if hit is not None:
            return hit
        if self.mode == "plan":
            return PLAN_DENIES
        if maybe is not None:
            return maybe
        unknown = analysis.undecidable()
        if unknown and guards:
            return Decision("ask", None, f"cannot tell statically what it runs ({unknown[0]}), "
                            f"so {guards[0].text} could be dodged")
        if (allow := self._bash_allowed(tool, analysis)) is not None:
            return allow
        return Decision("ask", None, UNCONFINED) if self.unconfined_bash else self._by_mode(tool)

    def _bash_allowed(self, tool: Tool, analysis: Analysis) -> Decision | None:
        """A bare ``Bash`` allow rule (unless bash runs unconfined), or allow rules that
        cover every command of a line that holds nothing unknown."""
        allow = list(self._rules("allow", tool))
        bare = [r.text for r in allow if r.bare]
        if bare and not self.unconfined_bash:
            return _allowed_by(bare)
        allow = [r for r in allow if not r.bare]
        if not (allow and analysis.commands and not analysis.problems
                and all(_allowed(c, allow) for c in analysis.commands)):
            return None
        return _allowed_by([r.text for r in allow if any(
            c.matches(r.specifier or "", by_name=False) == "yes" for c in analysis.walk())])

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

    def _matches(self, rule: Rule, tool: Tool, subject: str | None) -> bool:
        spec = rule.specifier
        if spec is None or rule.bare:
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


def _bash_hit(rules: list[Rule], analysis: Analysis) -> tuple[Decision | None, Decision | None]:
    """The first of ``rules`` a command of the line surely matches, else None; and an
    ask for the first one a command may match (its words are only known at run time)."""
    maybe: Decision | None = None
    for rule in rules:
        if rule.bare:
            return rule.decision(), None
        for cmd in analysis.walk():
            hit = cmd.matches(rule.specifier or "", by_name=True)
            if hit == "yes":
                return rule.decision(f" matches `{cmd.text()}`"), None
            if hit == "maybe" and maybe is None:
                why = cmd.opaque or "some of its words are only known at run time"
                maybe = Decision("ask", rule.text, f"`{cmd.text()}` may match {rule.behavior} "
                                 f"rule {rule.text} ({rule.source}): {why}")
    return None, maybe


def _allowed_by(rules: list[str]) -> Decision:
    texts = ", ".join(rules)
    return Decision("allow", texts, f"allow rule {texts}")


def _allowed(cmd: Command, rules: list[Rule]) -> bool:
    """A command is allowed when an allow rule matches it as written, or when it only
    runs other commands (a wrapper, ``bash -c``) that all are — never through ``sudo``,
    and never with an assignment that changes what runs (``PATH=…``)."""
    if any(risky_name(a) for a in cmd.assigns):
        return False
    if any(cmd.matches(r.specifier or "", by_name=False) == "yes" for r in rules):
        return True
    return (cmd.transparent and not cmd.escalates and not cmd.opaque and bool(cmd.runs)
            and all(_allowed(c, rules) for c in cmd.runs))


def _parse_lists(lists: dict[str, Iterable[str]], source: str) -> list[Rule]:
    rules: list[Rule] = []
    for behavior, texts in lists.items():
        if not isinstance(texts, list | tuple):
            raise ConfigError(f"{source}: permissions.{behavior} must be a list of rules")
        rules += [Rule.parse(t, behavior, source) for t in texts]  # type: ignore[arg-type]
    return rules


def _read_settings(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_regular(path))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    perms = data.get("permissions", {}) if isinstance(data, dict) else None
    if not isinstance(perms, dict):
        raise ConfigError(f"{path}: \"permissions\" must be an object")
    return perms
