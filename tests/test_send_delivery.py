"""`orchestrator send alice …` reaches alice's agent (issue 22): the built-in loop sees it at
its next step (real model client on the loopback API), a command agent reads it from
$ORCH_MESSAGES while it runs (a real team)."""

from __future__ import annotations

from pathlib import Path

from orchestrator import delivery
from orchestrator.model import Status
from tests.loopback import LoopbackAPI, tool_use
from tests.test_loop import Run, api  # noqa: F401 (the fixture)
from tests.test_team_support import (
    add_tasks,
    cli,
    finish,
    start,
    tasks,
    team_cleanup,
    team_env,
    wait_until,
    working_on,
)


def test_the_loop_puts_new_messages_in_front_of_the_model_at_its_next_step(
        repo: Path, api: LoopbackAPI) -> None:  # noqa: F811
    path = repo / "messages.md"
    delivery.start(path, [{"from": "lead", "ts": "t0", "body": "waiting since before"}])
    api.reply(tool_use("write", {"file_path": "a.txt", "content": "a\n"}, id="t1"))
    api.reply("All done.")  # the model thinks it is done, but a message came meanwhile
    api.reply("Done, with v2.")
    run = Run(repo, api, mode="acceptEdits")
    reader = delivery.Reader(path)
    # asked before the first request, after each step: the message comes with the model's
    # "All done." answer, which then is not the end
    sent = iter([None, None, {"from": "cli", "ts": "t1", "body": "the API moved to v2"}])

    def inbox() -> str:
        msg = next(sent, None)
        if msg is not None:
            delivery.deliver(path, msg)
        return reader.new()

    run.loop.inbox = inbox
    assert run() == "Done, with v2."
    first = api.requests[0]["messages"][0]["content"]
    assert "waiting since before" in str(first)
    third = api.requests[2]["messages"][-1]["content"]
    assert "the API moved to v2" in str(third) and "from cli" in str(third)
    assert "the API moved to v2" not in str(api.requests[1]["messages"])


AGENT = """for i in $(seq 300); do
  if grep -q "use the v2 API" "$ORCH_MESSAGES"; then
    grep -c "^## from cli" "$ORCH_MESSAGES" > got.txt; exit 0
  fi
  sleep 0.1
done
exit 1"""


def test_a_command_agent_reads_messages_sent_while_it_runs(repo: Path) -> None:
    [task] = add_tasks(repo, 1)
    with team_cleanup(repo):
        proc = start(repo, "--burst", "-n", "1", "--command", AGENT,
                     env=team_env(board_lease_seconds=3))
        wait_until(lambda: working_on(repo, task.id), 60, "the agent to start")
        out = cli(repo, "send", "alice", "use the v2 API")
        assert out.returncode == 0, out.stderr
        code, log = finish(proc, 90)
    assert code == 0, log
    [t] = tasks(repo)
    assert t.status is Status.REVIEW
    assert "to=" in log and "the agent of task_001" in log
    wt = repo / ".worktrees" / task.id
    assert (wt / "got.txt").read_text().strip() == "1"


def test_status_says_the_team_is_stopped_after_a_shutdown_request_to_all(repo: Path) -> None:
    import json

    from tests.test_team_support import mate

    with team_cleanup(repo):
        (repo / "orchestrator.toml").write_text("[team]\nteammates = 4\n")
        # idle teammates look at their mailbox each second; the log as JSON lines
        env = team_env(board_rescan_seconds=1, team_log_format="json")
        assert cli(repo, "up", "--detach", "-n", "1", "--command", "true", env=env
                   ).returncode == 0
        wait_until(lambda: mate(repo, "alice").get("state") == "idle", 60, "alice idle")
        # a later `config set` wins over `up -n`, and the log says what was running
        assert cli(repo, "config", "set", "team.teammates", "2").returncode == 0
        wait_until(lambda: mate(repo, "bob").get("state") == "idle", 60, "bob idle")
        logged = [json.loads(x) for x in
                  (repo / ".tasks" / ".run" / "daemon.log").read_text().splitlines()
                  if x.startswith("{")]
        [changed] = [r for r in logged if r.get("event") == "settings changed"]
        assert changed["changes"] == [{**changed["changes"][0], "old": 1, "new": 2}]
        st = json.loads(cli(repo, "status", "--json").stdout)
        assert st["running"] and not st["team_stopped"] and st["hint"] is None
        assert cli(repo, "send", "all", "wrap up", "--kind", "shutdown_request").returncode == 0
        wait_until(lambda: json.loads(cli(repo, "status", "--json").stdout)["team_stopped"],
                   60, "the team to stop")
        human = cli(repo, "status").stdout
        assert "every teammate has stopped" in human
        assert "orchestrator down, then orchestrator up" in human
        assert cli(repo, "down").returncode == 0
