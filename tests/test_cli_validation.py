"""Arguments are checked when given, with the valid choices, in one line (issues 16, 22)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.board import open_board
from orchestrator.layout import Layout
from tests.test_cli_board import ok, run


def tasks_on(repo: Path) -> int:
    return len(open_board(Layout.at(repo)).list())


@pytest.mark.parametrize(("args", "says"), [
    (["add", "x", "--backend", "rm -rf /"], "unknown backend 'rm -rf /' (choose from: command,"),
    (["add", "x", "--backend", "nonsense"], "claude-code"),
    (["add", "x", "--agent", "../../etc/passwd"], "not an agent profile name"),
    (["add", "x", "--agent", "nosuch"], "unknown agent profile 'nosuch'"),
    (["add", "x", "--agent", "a/b"], "not an agent profile name"),
    (["add", "two\nlines"], "the subject is one line"),
    (["add", "carriage\rreturn"], "the subject is one line"),
    (["add", "sep\u2028arator"], "the subject is one line"),
    (["send", "nosuch", "hi"], "no teammate 'nosuch' (choose from: all, lead, alice"),
    (["send", "../x", "hi"], "not a mailbox name"),
])
def test_bad_arguments_are_refused_when_given(capsys: pytest.CaptureFixture[str], repo: Path,
                                              args: list[str], says: str) -> None:
    code, out, err = run(capsys, repo, *args)
    assert code == 1 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and says in err, err
    assert tasks_on(repo) == 0
    assert not list((repo / ".tasks" / "mailboxes").glob("*.jsonl")) \
        if (repo / ".tasks" / "mailboxes").exists() else True


def test_send_kind_is_a_choice_and_known_names_work(capsys: pytest.CaptureFixture[str],
                                                    repo: Path) -> None:
    code, _, err = run(capsys, repo, "send", "alice", "hi", "--kind", "bogus")
    assert code == 2 and "'bogus' is not one of 'message', 'shutdown_request'" in " ".join(
        err.replace("│", " ").split())
    sent = json.loads(ok(capsys, repo, "send", "alice", "hi", "--json"))
    assert sent[0]["kind"] == "message" and sent[0]["to"] == "alice"
    sent = json.loads(ok(capsys, repo, "send", "bob", "stop", "--kind", "shutdown_request",
                         "--json"))
    assert sent[0]["request_id"]


def test_a_missing_folder_is_named_not_blamed_on_git(tmp_path: Path) -> None:
    for args in (["add", "x", "-C", str(tmp_path / "nonexistent")],
                 ["list", "-C", str(tmp_path / "nonexistent")]):
        out = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True,
                             text=True, timeout=60, check=False)
        assert out.returncode == 1
        assert out.stderr == f"error: no such folder: {tmp_path / 'nonexistent'}\n"


def test_help_texts_keep_their_words_and_list_the_backends(
        capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    add_help = " ".join(ok(capsys, repo, "add", "--help").replace("│", " ").split())
    assert "[agents.NAME] in orchestrator.toml" in add_help  # not eaten as markup
    assert "claude-code" in add_help
    up_help = " ".join(ok(capsys, repo, "up", "--help").replace("│", " ").split())
    assert "Agent backend: command, anthropic, scripted, claude-code" in up_help


def test_txt_drops_are_refused_with_the_reason(capsys: pytest.CaptureFixture[str],
                                               repo: Path) -> None:
    inbox = repo / ".tasks" / "inbox"
    inbox.mkdir(parents=True, exist_ok=True)
    (inbox / "note.txt").write_text("# Looks like a task\n")
    os.utime(inbox / "note.txt", (1, 1))  # past intake's settle delay for unreadable drops
    (repo / ".tasks" / "readme.txt").write_text("notes of mine, left alone\n")
    assert json.loads(ok(capsys, repo, "list", "--json")) == []
    rejected = repo / ".tasks" / "rejected"
    assert (rejected / "note.txt").exists()
    assert "drop .json or .md files" in (rejected / "note.txt.error.txt").read_text()
    assert (repo / ".tasks" / "readme.txt").exists()


def test_help_texts_break_only_where_the_terminal_does(
        capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    from orchestrator.cli import load_app

    app = load_app()
    for info in app.registered_commands:
        for paragraph in (info.help or "").split("\n\n"):
            assert "\n" not in paragraph, info.help
    from orchestrator.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    top = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "cancelled tasks, when no work would be lost; say what was skipped and why" in top
