"""``orchestrator plan``: a lead model (scripted, or the real SDK on the loopback API)
turns a goal into tasks with dependencies on a real board."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.board import open_board
from orchestrator.board.eventlog import EventLog
from orchestrator.layout import Layout
from orchestrator.model import Task
from tests.loopback import LoopbackAPI, tool_use
from tests.test_cli_board import ok, run

GOAL = "Add a /health endpoint with a client and docs"


def create(ref: str, subject: str, blocked_by: list[str] | None = None,
           **extra: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"ref": ref, "subject": subject,
                            "description": f"Do {subject.lower()}.", **extra}
    if blocked_by is not None:
        args["blocked_by"] = blocked_by
    return {"tool": "task_create", "args": args}


THREE_TASKS = [
    [{"tool": "ls", "args": {}}, {"tool": "read", "args": {"file_path": "README.md"}}],
    [create("api", "Add the /health endpoint",
            acceptance_criteria=["GET /health answers 200", "a test covers it"]),
     create("docs", "Document the endpoint")],
    [create("client", "Call /health from the client", blocked_by=["api"], priority=2)],
    "Three tasks: the endpoint, then its client; docs in parallel.",
]


def script(tmp_path: Path, steps: list[Any]) -> str:
    path = tmp_path / "lead.json"
    path.write_text(json.dumps({"steps": steps}))
    return str(path)


def board_tasks(repo: Path) -> list[Task]:
    with open_board(Layout.at(repo)) as board:
        return board.list()


def snapshot(repo: Path) -> dict[str, bytes]:
    """Every file under .tasks and .worktrees (the board, events, logs), but the board's
    derived index (a cache of the task files that any read may bring up to date)."""
    out = {}
    for top in (repo / ".tasks", repo / ".worktrees"):
        for p in sorted(top.rglob("*")) if top.exists() else []:
            if p.is_file() and ".index" not in p.relative_to(repo).parts:
                out[str(p.relative_to(repo))] = p.read_bytes()
    return out


def test_a_scripted_lead_turns_a_goal_into_three_tasks_with_one_dependency(
        capsys: pytest.CaptureFixture[str], repo: Path, tmp_path: Path) -> None:
    out = json.loads(ok(capsys, repo, "plan", GOAL, "--script", script(tmp_path, THREE_TASKS),
                        "--json"))
    assert out["written"] and out["goal"] == GOAL
    assert out["summary"].startswith("Three tasks")
    api, docs, client = board_tasks(repo)
    assert [t.subject for t in (api, docs, client)] == [
        "Add the /health endpoint", "Document the endpoint", "Call /health from the client"]
    assert api.blocked_by == [] and docs.blocked_by == []
    assert client.blocked_by == [api.id] and client.priority == 2
    assert "Acceptance criteria:\n- GET /health answers 200\n- a test covers it" \
        in api.description
    assert client.metadata["plan"] == {"goal": GOAL, "ref": "client",
                                       "id": client.metadata["plan"]["id"]}
    assert client.metadata["plan"]["id"].startswith("plan-")
    assert [t["id"] for t in out["tasks"]] == [api.id, docs.id, client.id]
    assert out["tasks"][2]["blocked_by"] == [api.id]
    layout = Layout.at(repo)
    events = list(EventLog(layout.events).read())
    created = [e for e in events if e["event"] == "task_created"]
    assert [e["actor"] for e in created] == ["lead"] * 3
    [written] = [e for e in events if e["event"] == "plan_written"]
    assert written["tasks"] == [api.id, docs.id, client.id]
    [log] = list(layout.logs.glob("plan-*.jsonl"))
    kinds = [json.loads(x)["kind"] for x in log.read_text().splitlines()]
    assert kinds[0] == "agent_start" and kinds.count("tool_call") == 5
    start = json.loads(log.read_text().splitlines()[0])
    assert start["tools"] == ["read", "glob", "grep", "ls", "task_list", "task_get",
                              "task_create"]
    assert "turn the user's goal into tasks" in start["system"][0]["text"]


def test_human_output_names_ids_and_blockers(capsys: pytest.CaptureFixture[str], repo: Path,
                                             tmp_path: Path) -> None:
    out = ok(capsys, repo, "plan", GOAL, "--script", script(tmp_path, THREE_TASKS))
    assert out.splitlines()[0] == f"added 3 tasks for: {GOAL}"
    assert "task_003  Call /health from the client  (blocked by task_001)" in out


def test_dry_run_prints_the_plan_and_writes_nothing(capsys: pytest.CaptureFixture[str],
                                                    repo: Path, tmp_path: Path) -> None:
    ok(capsys, repo, "init")
    ok(capsys, repo, "list")  # opening the board creates its (empty) index files
    (repo / ".tasks" / "inbox" / "dropped.md").write_text("# Dropped task\n")
    before = snapshot(repo)
    out = ok(capsys, repo, "plan", GOAL, "--dry-run", "--script", script(tmp_path, THREE_TASKS))
    assert out.splitlines()[0] == f"planned 3 tasks for: {GOAL}"
    assert "  client    Call /health from the client  (blocked by api)" in out
    assert out.rstrip().endswith("dry run: nothing was written")
    assert snapshot(repo) == before
    assert board_tasks(repo) == []
    data = json.loads(ok(capsys, repo, "plan", GOAL, "--dry-run", "--json", "--script",
                         script(tmp_path, THREE_TASKS)))
    assert not data["written"] and [t["id"] for t in data["tasks"]] == [None] * 3
    assert snapshot(repo) == before


@pytest.mark.parametrize(("steps", "message"), [
    ([[create("a", "A", blocked_by=["b"]), create("b", "B", blocked_by=["c"]),
       create("c", "C", blocked_by=["b"])], "done"],
     "error: plan refused: dependency cycle b -> c -> b; nothing was written\n"),
    ([[create("a", "A", blocked_by=["a"])], "done"],
     "error: plan refused: dependency cycle a -> a; nothing was written\n"),
    ([[create("a", "A"), create("b", "B", blocked_by=["zzz"])], "done"],
     "error: plan refused: b is blocked by 'zzz', which is neither a planned task (a, b) "
     "nor a task on the board; nothing was written\n"),
    ([[create("a", "A", blocked_by=["task_042"])], "done"],
     "error: plan refused: a is blocked by 'task_042', which is neither"),
    (["Nothing to do here."], "error: the lead planned no tasks: Nothing to do here.\n"),
])
def test_a_bad_plan_is_refused_and_nothing_is_written(
        capsys: pytest.CaptureFixture[str], repo: Path, tmp_path: Path,
        steps: list[Any], message: str) -> None:
    ok(capsys, repo, "init")
    ok(capsys, repo, "list")
    before = snapshot(repo)
    code, out, err = run(capsys, repo, "plan", GOAL, "--script", script(tmp_path, steps))
    assert code == 1 and out == ""
    assert err.startswith(message) and err.count("\n") == 1
    after = snapshot(repo)
    assert {k: v for k, v in after.items() if k.startswith(".tasks/task_")} == {}
    assert not [e for e in EventLog(Layout.at(repo).events).read()
                if e["event"] in ("task_created", "plan_written")]
    tasks_dir = {k: v for k, v in after.items()
                 if k.startswith(".tasks/") and "/logs/plan-" not in k}
    assert tasks_dir == {k: v for k, v in before.items() if k.startswith(".tasks/")}


def test_blockers_may_be_tasks_already_on_the_board(capsys: pytest.CaptureFixture[str],
                                                   repo: Path, tmp_path: Path) -> None:
    ok(capsys, repo, "add", "Existing work")
    steps = [[create("a", "After the existing work", blocked_by=["task_001"])], "ok"]
    ok(capsys, repo, "plan", GOAL, "--script", script(tmp_path, steps))
    assert board_tasks(repo)[1].blocked_by == ["task_001"]


def test_the_lead_cannot_change_the_repository(capsys: pytest.CaptureFixture[str],
                                               repo: Path, tmp_path: Path) -> None:
    (repo / "orchestrator.toml").write_text('[agent]\npermission_mode = "bypassPermissions"\n')
    steps = [[{"tool": "write", "args": {"file_path": "x.txt", "content": "x"}},
              {"tool": "bash", "args": {"command": "touch y.txt"}},
              create("a", "A", agent="nobody")],
             [create("a", "A")], "ok"]
    ok(capsys, repo, "plan", GOAL, "--script", script(tmp_path, steps))
    assert not (repo / "x.txt").exists() and not (repo / "y.txt").exists()
    [log] = list(Layout.at(repo).logs.glob("plan-*.jsonl"))
    results = [json.loads(x) for x in log.read_text().splitlines()]
    errors = [r["content"] for r in results if r["kind"] == "tool_result" and r["is_error"]]
    assert errors[0].startswith("unknown tool 'write'")
    assert errors[1].startswith("unknown tool 'bash'")
    assert "unknown agent profile 'nobody' (profiles: none defined)" in errors[2]
    assert len(board_tasks(repo)) == 1


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackAPI]:
    with LoopbackAPI() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-key")
        yield server


def test_the_anthropic_lead_plans_through_the_real_sdk(
        capsys: pytest.CaptureFixture[str], repo: Path, api: LoopbackAPI) -> None:
    (repo / "orchestrator.toml").write_text('[agent]\nmodel = "claude-opus-4-1"\n')
    api.reply(tool_use("task_create", {"ref": "one", "subject": "First",
                                       "description": "first part"}),
              tool_use("task_create", {"ref": "two", "subject": "Second",
                                       "description": "second part", "blocked_by": ["one"]}))
    api.reply("Planned two tasks.")
    out = json.loads(ok(capsys, repo, "plan", "Split the work", "--json"))
    first, second = board_tasks(repo)
    assert second.blocked_by == [first.id]
    assert out["usage"]["input_tokens"] + out["usage"]["cache_write_tokens"] > 0
    assert [r["model"] for r in api.requests] == ["claude-opus-4-1"] * 2
    assert [t["name"] for t in api.requests[0]["tools"]][-1] == "task_create"
    assert "Split the work" in json.dumps(api.requests[0]["system"])
    assert not api.errors


def test_a_subject_the_lead_model_wrote_reaches_the_terminal_written_out(
        capsys: pytest.CaptureFixture[str], repo: Path, tmp_path: Path) -> None:
    """The lead model's task subjects are its own text: an OSC 52 clipboard write or a
    screen clear in one is printed written out; the board keeps the text as it is."""
    hostile = "Add it \x1b]52;c;cHduZWQ=\x07\x1b[2J now"
    steps = [[create("api", hostile)], "One task."]
    out = ok(capsys, repo, "plan", GOAL, "--script", script(tmp_path, steps))
    assert "\x1b" not in out and "\x07" not in out
    assert "Add it \\x1b]52;c;cHduZWQ=\\x07\\x1b[2J now" in out
    assert [t.subject for t in board_tasks(repo)] == [hostile]


def test_a_plan_naming_a_broken_profile_is_refused_as_add_refuses_it(
        capsys: pytest.CaptureFixture[str], repo: Path, tmp_path: Path) -> None:
    """The plan adds its tasks through `add_task`, the one path of every face: a profile
    whose file is broken is refused before anything is written, with add's reason."""
    agents = repo / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "scout.md").write_text("no front matter here\n")
    ok(capsys, repo, "init")
    code, _, add_err = run(capsys, repo, "add", "A", "--agent", "scout")
    assert code == 1 and "agent profile 'scout' is broken" in add_err
    steps = [[create("a", "A"), create("b", "B", agent="scout")], "done"]
    code, out, err = run(capsys, repo, "plan", GOAL, "--script", script(tmp_path, steps))
    assert code == 1 and out == ""
    assert err == f"error: plan refused: task b: {add_err.removeprefix('error: ')}"
    assert board_tasks(repo) == []
