"""A GitHub stand-in for a test's repository (helpers, no tests): a bare clone as the
remote ``origin``, users with tokens, ``[forge]`` in orchestrator.toml, and every exchange
checked against GitHub's OpenAPI description (the test fails on any mismatch)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("githubkit", reason="the forge extra is not installed (scripts/install test)")
pytest.importorskip("openapi_core", reason="openapi-core is not installed (scripts/install test)")

from githubkit import GitHub

from orchestrator.forge.openapi import Validator, description_file, pruned
from orchestrator.forge.standin import StandIn
from tests.helpers import git

BOT = "ghp_orchestratorbot0000000001"
REVIEWER = "ghp_reviewer00000000000000002"
STRANGER = "ghp_stranger00000000000000003"


def load_validator(cache: Path) -> Validator:
    source = description_file()
    if source is None:
        pytest.skip("GitHub's OpenAPI description is missing (npm @octokit/openapi: "
                    "scripts/test-deps)")
    return Validator(pruned(source, cache))


@contextlib.contextmanager
def standin(repo: Path, validator: Validator, *, settings: str = "") -> Iterator[StandIn]:
    """The stand-in on loopback over a bare clone of ``repo`` (now its ``origin``), with the
    bot (write), a reviewer (write) and a stranger (read); ``[forge]`` points at it."""
    bare = repo.parent / "remote.git"
    git(repo.parent, "clone", "--quiet", "--bare", str(repo), str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "fetch", "--quiet", "origin")
    token = repo.parent / "forge-token"
    token.write_text(BOT + "\n")
    (repo / "orchestrator.toml").write_text(
        f'[forge]\nkind = "github"\nrepo = "acme/app"\napi_url = "{{url}}"\n'
        f'token_file = "{token}"\npoll_seconds = 1\npoll_max_seconds = 2\n{settings}')
    validator.problems.clear()
    validator.checked = 0  # what a test counts is its own (the validator is per session)
    with StandIn(bare, "acme/app") as s:
        path = repo / "orchestrator.toml"
        path.write_text(path.read_text().replace("{url}", s.url))
        s.validator = validator
        s.add_user("orch-bot", BOT, "write")
        s.add_user("reviewer", REVIEWER, "write")
        s.add_user("stranger", STRANGER, "read")
        yield s
    assert validator.problems == [], "\n".join(validator.problems)


_people: dict[tuple[str, str], GitHub[Any]] = {}


def person(s: StandIn, token: str = REVIEWER) -> GitHub[Any]:
    """A person (or CI) acting on the stand-in through githubkit, as on GitHub (kept: a
    githubkit namespace holds its client only weakly)."""
    key = (s.url, token)
    if key not in _people:
        _people[key] = GitHub(token, base_url=s.url + "/", http_cache=False, auto_retry=False)
    return _people[key]


def finish_check(s: StandIn, sha: str, conclusion: str, *, name: str = "ci",
                 summary: str = "", annotations: list[dict[str, Any]] | None = None) -> None:
    """CI reports a check run on ``sha`` (as a GitHub App would)."""
    output: dict[str, Any] = {"title": f"{name} {conclusion}", "summary": summary or conclusion}
    if annotations:
        output["annotations"] = annotations
    person(s).rest.checks.create("acme", "app", name=name, head_sha=sha, status="completed",
                                 conclusion=conclusion, output=output)  # type: ignore[arg-type]
