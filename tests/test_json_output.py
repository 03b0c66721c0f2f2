"""`--json` on every command that prints; errors are JSON on stderr with it; `show` reads
for a person (lease expiry as a time, what a waiting agent asks); `enter 2` names task_002."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from orchestrator.board import open_board
from orchestrator.cli import main
from orchestrator.layout import Layout
from tests.test_cli_board import ok, run
from tests.test_review import keep


def test_json_everywhere_and_json_errors(capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    task = keep(repo, "Greeting", {"hello.txt": "hi\n"})
    out = json.loads(ok(capsys, repo, "diff", "1", "--json"))
    assert out["task"] == task.id and "+hi" in out["diff"]
    assert json.loads(ok(capsys, repo, "down", "--json")) == {"stopped": False, "pid": None,
                                                             "mode": "warm"}
    with pytest.raises(SystemExit) as exc:
        main(["enter", "1", "--json", "--repo", str(repo), "--", "true"])
    code, out = int(exc.value.code or 0), capsys.readouterr().out
    assert code == 0 and json.loads(out.splitlines()[-1])["exit_code"] == 0
    assert json.loads(out.splitlines()[-1])["task"] == task.id
    for args, kind, code_wanted in ((["show", "99", "--json"], "NotFound", 1),
                                    (["send", "x", "y", "--kind", "bogus", "--json"],
                                     "UsageError", 2),
                                    (["merge", "42", "--json"], "NotFound", 1)):
        code, out, err = run(capsys, repo, *args)
        assert code == code_wanted and out == ""
        doc = json.loads(err)
        assert doc["type"] == kind and doc["error"], err


def test_enter_names_the_task_in_full(capsys: pytest.CaptureFixture[str], repo: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    keep(repo, "One", {"a.txt": "a\n"})
    monkeypatch.setenv("SHELL", "/bin/true")
    code, _, err = run(capsys, repo, "enter", "1")
    assert code == 0 and err.startswith("entering task_001 in ")


def test_show_gives_the_lease_expiry_as_a_time_and_what_a_waiting_agent_asks(
        capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    layout = Layout.at(repo)
    with open_board(layout) as board:
        task = board.add("Needs a tool")
        claimed = board.claim("alice", task_id=task.id)
        assert claimed is not None and claimed.lease is not None
        board.update(task.id, claimed.lease.token, waiting_for="req-1")
        board.requests.ask("permission", request_id="req-1", sender="alice", task=task.id,
                           body="Bash(npm publish)", tool="Bash", subject="npm publish")
    text = ok(capsys, repo, "show", "1")
    assert re.search(r"lease: alice, token 1, expires \d\d:\d\d:\d\d UTC \(in \d+s\)", text)
    assert "expires_at" not in text
    assert "asks to run Bash(npm publish)" in text
