"""Forges: where a team reviews in pull requests (GitHub first; GitLab and Forgejo fit the
same `Forge` Protocol).

    forge/__init__.py   the Protocol, the records it speaks in, its errors, `open_forge`
    forge/github.py     GitHub's REST API through githubkit (conditional requests, rate limits)
    forge/sync.py       one pass of the loop: a pull request per kept task, CI and review
                        comments back to the agent
    forge/issues.py     labelled issues in as tasks
    forge/merging.py    merged there = merged here; merge and land through the API
    forge/watcher.py    the lead's thread that runs `sync` with back-off, woken by webhooks
    forge/webhook.py    the web board's endpoint for the forge's webhooks (HMAC-checked)
    forge/standin.py    a GitHub stand-in on loopback over a real bare repository (tests,
                        benchmarks); forge/shapes.py its answers in GitHub's shapes
    forge/openapi.py    GitHub's OpenAPI description, pruned to what we use, checking every
                        request the stand-in gets and every answer it gives (tests)

Errors::

    RunError
    └── ForgeError              the forge refused or could not be reached (one line, no token)
        ├── ForgeDown           connection refused, timeout, 5xx
        ├── AuthFailed          401: the token is missing, revoked or expired
        └── RateLimited         403/429 with retry-after or x-ratelimit-remaining: 0

Everything a forge says (titles, bodies, comments, check output, user names) is data from
people outside the team: it is bounded, shown as text, and never decides more than which
task it is about.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from orchestrator.errors import ConfigError, RunError, install_hint

if TYPE_CHECKING:
    from orchestrator.config import ForgeConfig
    from orchestrator.model import ForgeLink

CiState = Literal["none", "pending", "success", "failure"]
MAX_TEXT = 20_000
"""A comment, a body or a check's output is cut to this many characters."""


class ForgeError(RunError):
    """The forge refused a request or could not be reached."""


class ForgeDown(ForgeError):
    pass


class AuthFailed(ForgeError):
    pass


class RateLimited(ForgeError):
    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class PullRequest:
    number: int
    url: str
    state: Literal["open", "closed"]
    merged: bool
    draft: bool
    head: str
    """The head branch's name."""
    head_sha: str
    base: str
    merge_commit: str | None = None
    node_id: str = ""
    updated: str = ""
    """When it last changed (a comment, a review, a push, a merge); GitHub's ``updated_at``."""


@dataclass(frozen=True)
class Check:
    """One check run or commit status on a commit."""

    name: str
    state: Literal["pending", "success", "failure"]
    conclusion: str
    """GitHub's word for it: success, failure, timed_out, cancelled, error …"""
    details: str = ""
    """The tail of its output, annotations (``file:line: message``) or description."""
    url: str = ""


@dataclass(frozen=True)
class Feedback:
    """A review or a comment on a pull request."""

    id: str
    """``review-N``, ``comment-N`` or ``inline-N``: unique across the three lists."""
    author: str
    kind: Literal["changes_requested", "comment", "inline", "approved"]
    body: str
    path: str | None = None
    line: int | None = None
    reply_to: int | None = None
    """For an inline comment: the comment id to reply under."""


@dataclass(frozen=True)
class Issue:
    number: int
    title: str
    body: str
    state: Literal["open", "closed"]
    labels: tuple[str, ...]
    url: str
    author: str = ""


@dataclass(frozen=True)
class CheckLine:
    """One line of ``orchestrator forge check``."""

    what: str
    ok: bool
    detail: str


@dataclass
class Stats:
    """Requests sent, by the status they got (a 304 does not count against GitHub's limit)."""

    requests: int = 0
    not_modified: int = 0
    by_route: dict[str, int] = field(default_factory=dict)

    @property
    def counted(self) -> int:
        return self.requests - self.not_modified


class Forge(Protocol):
    """What orchestrator needs of a forge. Numbers are pull request or issue numbers."""

    kind: str
    repo: str
    stats: Stats

    def check(self) -> list[CheckLine]: ...
    def login(self) -> str: ...
    def find_pull(self, head: str) -> PullRequest | None: ...
    def recent_pulls(self) -> list[PullRequest]: ...
    def open_pull(self, *, head: str, base: str, title: str, body: str,
                  draft: bool) -> PullRequest: ...
    def get_pull(self, number: int) -> PullRequest: ...
    def edit_pull(self, number: int, *, title: str | None = None, body: str | None = None,
                  base: str | None = None, state: str | None = None) -> PullRequest: ...
    def ready_for_review(self, pull: PullRequest) -> None: ...
    def merge_pull(self, number: int, *, sha: str, method: str) -> str: ...
    def checks(self, sha: str) -> list[Check]: ...
    def feedback(self, number: int) -> list[Feedback]: ...
    def can_write(self, login: str) -> bool: ...
    def comment(self, number: int, body: str) -> None: ...
    def reply(self, number: int, comment_id: int, body: str) -> None: ...
    def issues(self, label: str) -> list[Issue]: ...
    def close(self) -> None: ...


def cut(text: str | None, limit: int = MAX_TEXT) -> str:
    """``text`` bounded: its head and tail kept around a marker when it is too long."""
    text = text or ""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n… [{len(text) - limit} characters cut] …\n{text[-half:]}"


def open_forge(config: ForgeConfig, root: Path, *, transport: Any = None) -> Forge | None:
    """The team's forge (``[forge]``), or None when ``kind = "none"``. A `ConfigError` when
    the repository or the token is missing."""
    if config.kind == "none":
        return None
    if not config.repo:
        raise ConfigError("[forge] repo is not set (owner/name of the repository on GitHub)")
    try:
        from orchestrator.forge.github import GitHubForge, find_token
    except ImportError as exc:
        raise ConfigError(f"[forge] needs the forge extra ({exc.name} is missing): "
                          f"{install_hint('forge')}") from None

    return GitHubForge(config.repo, find_token(config.token_file, root), api_url=config.api_url,
                       transport=transport)


def pull_request(link: ForgeLink | None) -> dict[str, Any] | None:
    """A task's pull request as every face gives it (``list --json``, ``review --json``, MCP,
    the web board); None when it has none."""
    if link is None or (link.pr is None and link.issue is None):
        return None
    url = link.url if link.url and link.url.startswith(("https://", "http://")) else None
    return {"number": link.pr, "url": url, "state": link.state, "ci": link.ci,
            "issue": link.issue, "problem": link.note}


def pull_request_cell(pr: dict[str, Any] | None) -> str:
    """``#12 CI failure`` (a table cell) from `pull_request`'s dict; empty without one."""
    if pr is None or pr["number"] is None:
        return ""
    if pr["state"] in ("merged", "closed"):
        return f"#{pr['number']} {pr['state']}"
    return f"#{pr['number']} CI {pr['ci']}" if pr["ci"] != "none" else f"#{pr['number']}"
