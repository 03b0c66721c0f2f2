"""The whole forge loop with a real team (issue 32): issue -> task -> pull request ->
failing CI -> fixed -> changes requested -> fixed -> merged on the forge -> task merged and
cleaned up. ``orchestrator up`` runs in its own process; the test plays GitHub's people and
CI through the stand-in's REST API."""

from __future__ import annotations

from pathlib import Path

from orchestrator.forge.openapi import Validator
from orchestrator.forge.standin import StandIn
from orchestrator.model import Status
from tests.forge_support import finish_check, person, standin
from tests.helpers import git
from tests.test_team_support import (
    cli,
    events,
    finish,
    start,
    tasks,
    team_cleanup,
    wait_until,
)

AGENT = 'printf "%s\\n---\\n" "$ORCH_PROMPT" >> notes.md'
"""Each run appends its prompt (subject, description, feedback): a new commit every time."""



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
            assert any(c.get("reply_to") and "back to its agent" in c["body"] for c in gh.inline)
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


def test_a_webhook_restarts_the_agent_without_waiting_for_a_poll(
        repo: Path, validator: Validator) -> None:
    import hashlib
    import hmac
    import time
    import urllib.error
    import urllib.request

    from tests.test_ui_support import running_ui, wait_http_ready

    secret = "webhook-secret-0123456789"
    (repo.parent / "hook-secret").write_text(secret)
    settings = f'webhook_secret_file = "{repo.parent / "hook-secret"}"\n'
    with standin(repo, validator, settings=settings) as gh:
        toml = repo / "orchestrator.toml"  # polls too rare to explain what follows
        toml.write_text(toml.read_text().replace("poll_seconds = 1\npoll_max_seconds = 2",
                                                 "poll_seconds = 120\npoll_max_seconds = 120"))
        with team_cleanup(repo), running_ui(repo) as ui:
            wait_http_ready(ui)
            url = ui.base + "/forge/webhook"
            body = b'{"action": "completed"}'

            def deliver(sig: str) -> int:
                req = urllib.request.Request(url, body, method="POST", headers={
                    "X-Hub-Signature-256": sig, "X-GitHub-Event": "check_run"})
                try:
                    return urllib.request.urlopen(req, timeout=10).status
                except urllib.error.HTTPError as exc:
                    return exc.code

            assert deliver("sha256=" + "0" * 64) == 401  # not signed with our secret
            assert not events(repo, "forge_webhook")
            good = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
            assert deliver(good) == 204
            assert [e["hook"] for e in events(repo, "forge_webhook")] == ["check_run"]
            gh.add_hook(url, secret)
            lead = start(repo, "-n", "1", "--backend", "command", "--command", AGENT)
            try:
                from tests.test_team_support import add_tasks

                [task] = add_tasks(repo, 1)
                wait_until(lambda: gh.pulls, 60, "a pull request")
                pr = next(iter(gh.pulls.values()))
                first = head(gh, pr.number)
                claims = len([e for e in events(repo, "task_claimed")])
                t0 = time.monotonic()
                finish_check(gh, first, "failure", summary="red")
                wait_until(lambda: len(events(repo, "task_claimed")) > claims, 30,
                           "the agent restarted by the webhook")
                assert time.monotonic() - t0 < 5  # not the 120 s poll, nor a 10 s rescan
            finally:
                cli(repo, "down")
                finish(lead)
    assert tasks(repo)[0].id == task.id
