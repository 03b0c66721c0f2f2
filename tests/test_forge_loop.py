"""The whole forge loop with a real team (issue 32): issue -> task -> pull request ->
failing CI -> fixed -> changes requested -> fixed -> merged on the forge -> task merged and
cleaned up. ``orchestrator up`` runs in its own process; the test plays GitHub's people and
CI through the stand-in's REST API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.forge.openapi import Validator
from orchestrator.forge.standin import StandIn
from orchestrator.model import Status
from tests.forge_support import finish_check, load_validator, person, standin
from tests.helpers import git
from tests.test_team_support import cli, events, finish, start, tasks, team_cleanup, wait_until

AGENT = 'printf "%s\\n---\\n" "$ORCH_PROMPT" >> notes.md'
"""Each run appends its prompt (subject, description, feedback): a new commit every time."""


@pytest.fixture(scope="module")
def validator(tmp_path_factory: pytest.TempPathFactory) -> Validator:
    return load_validator(tmp_path_factory.mktemp("openapi"))


@pytest.fixture
def gh(repo: Path, validator: Validator) -> Iterator[StandIn]:
    with standin(repo, validator) as s:
        yield s


def head(gh: StandIn, number: int) -> str:
    return gh.head_of(gh.pulls[number].head) or ""


def test_issue_to_merged_through_ci_and_review(repo: Path, gh: StandIn) -> None:
    p = person(gh)
    p.rest.issues.create("acme", "app", title="Add notes", body="Write the notes file.",
                         labels=["orchestrator"])
    with team_cleanup(repo):
        lead = start(repo, "-n", "1", "--backend", "command", "--command", AGENT)
        try:
            # the issue becomes a task, the task a pull request
            wait_until(lambda: gh.pulls, 60, "a pull request")
            pr = next(iter(gh.pulls.values()))
            [task] = tasks(repo)
            assert task.forge is not None and task.forge.issue == 1
            assert "Closes #1" in pr.body and pr.base == "main"
            first = head(gh, pr.number)
            # CI fails: back to the agent with the check's output
            finish_check(gh, first, "failure", summary="test_notes failed",
                         annotations=[{"path": "notes.md", "start_line": 1, "end_line": 1,
                                       "annotation_level": "failure", "message": "too short"}])
            wait_until(lambda: head(gh, pr.number) != first, 60, "the fix pushed")
            second = head(gh, pr.number)
            notes = git(repo, "show", f"{second}:notes.md")
            assert "CI failed on pull request #2" in notes and "ci: failure" in notes
            assert "notes.md:1: failure: too short" in notes
            finish_check(gh, second, "success")
            # changes requested, with an inline comment: back again
            p.rest.pulls.create_review("acme", "app", pr.number, event="REQUEST_CHANGES",
                                       body="Say why.", comments=[
                                           {"path": "notes.md", "line": 1, "body": "Why?"}])
            wait_until(lambda: head(gh, pr.number) != second, 60, "the review answered")
            third = head(gh, pr.number)
            notes = git(repo, "show", f"{third}:notes.md")
            assert "reviewer: Say why." in notes and "reviewer (notes.md:1): Why?" in notes
            assert any(c.get("reply_to") and "Sent back" in c["body"] for c in gh.inline)
            # merged on the forge: merged on the board, cleaned up
            wait_until(lambda: tasks(repo)[0].status is Status.REVIEW
                       and tasks(repo)[0].forge.pushed == third, 30, "review again")  # type: ignore[union-attr]
            p.rest.pulls.merge("acme", "app", pr.number)
            wait_until(lambda: tasks(repo)[0].status is Status.MERGED, 60, "merged here")
        finally:
            cli(repo, "down")
            code, out = finish(lead)
    assert code == 0, out
    [task] = tasks(repo)
    assert task.forge is not None and task.forge.state == "merged"
    assert task.worktree is None or not Path(task.worktree).exists()
    assert git(repo, "rev-parse", "main") == git(repo.parent / "remote.git", "rev-parse", "main")
    assert (repo / "notes.md").read_text().count("---") == 3
    story = [e["event"] for e in events(repo) if e.get("task") == task.id
             and e["event"].startswith(("pr_", "issue_", "merged", "task_retried"))]
    assert story[:2] == ["issue_taken", "pr_opened"] and story[-1] == "merged"
    assert story.count("task_retried") == 2 and "pr_checks" in story
    assert gh.issues[1].state == "closed"  # "Closes #1"
