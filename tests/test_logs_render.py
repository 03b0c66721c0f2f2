"""`orchestrator logs ID` is a transcript a person reads; `--raw` keeps every record;
`logs -f` ends when the task's run ends."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.board import open_board
from orchestrator.board.tasklogs import TaskLog
from orchestrator.layout import Layout
from orchestrator.model import Usage
from orchestrator.transcript import (
    AgentEnd,
    AgentStart,
    ClaudeCode,
    Commit,
    Output,
    ToolCall,
    ToolReturned,
    TurnRequest,
    TurnResponse,
    VerifyFinished,
)

RECORDS = [
    AgentStart(model="claude-x", system="SYSTEM PROMPT " * 50, tools=["read", "bash"],
               first_message="Begin work on task_001: Fix it"),
    TurnRequest(turn=1, messages=1, bytes=999),
    TurnResponse(turn=1, content=[
        {"type": "text", "text": "Reading the parser first."},
        {"type": "tool_use", "id": "t1", "name": "read", "input": {"file_path": "parser.py"}},
        {"type": "tool_use", "id": "t2", "name": "bash",
         "input": {"command": "pytest -q tests/test_parser.py", "timeout": 60}}],
        stop_reason="tool_use", usage=Usage(input_tokens=10)),
    ToolCall(id="t1", name="read", input={"file_path": "parser.py"}),
    ToolReturned(id="t1", name="read", content="line one\nline two\nline 3", is_error=False),
    ToolReturned(id="t2", name="bash", content="1 failed", is_error=True),
    ClaudeCode(message={"type": "assistant", "message": {"content": [
        {"type": "tool_use", "name": "Edit", "input": {"file_path": "a.py", "old": "x"}}]}}),
    ClaudeCode(message={"type": "result", "subtype": "success", "num_turns": 3,
                        "total_cost_usd": 0.0123}),
    AgentEnd(outcome="finished", turns=2, compactions=0,
             usage=Usage(input_tokens=100, output_tokens=20, cost_usd=0.5)),
    Commit(sha="0123456789abcdef0123"),
    VerifyFinished(passed=False, result="exit code 1", seconds=1.5),
]


def orch(repo: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=repo,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_logs_render_a_transcript_and_raw_keeps_everything(repo: Path) -> None:
    with open_board(Layout.at(repo)) as board:
        task = board.add("Fix it")
    log = TaskLog(Layout.at(repo), task.id, actor="alice")
    for entry in RECORDS:
        log.write(entry)
    human = orch(repo, "logs", task.id)
    assert human.returncode == 0, human.stderr
    text = human.stdout
    assert "agent started (claude-x): Begin work on task_001: Fix it" in text
    assert "Reading the parser first." in text
    assert "→ read(parser.py)" in text and "→ bash(pytest -q tests/test_parser.py)" in text
    assert "  ← line one (+2 lines)" in text and "  ✗ 1 failed" in text
    assert "→ Edit(a.py)" in text and "Claude Code success: 3 turn(s), $0.0123" in text
    assert "agent ended: finished after 2 turn(s), 120 tokens, $0.5000" in text
    assert "committed 0123456789ab" in text and "checks failed: exit code 1" in text
    assert "SYSTEM PROMPT" not in text and "bytes" not in text and "{'" not in text
    raw = orch(repo, "logs", task.id, "--raw").stdout
    assert "SYSTEM PROMPT" in raw and "request" in raw


def test_logs_follow_ends_when_the_run_ends(repo: Path) -> None:
    with open_board(Layout.at(repo)) as board:
        task = board.add("Quick")
        claimed = board.claim("alice", task_id=task.id)
        assert claimed is not None and claimed.lease is not None
    TaskLog(Layout.at(repo), task.id, actor="alice").write(Commit(sha="ab" * 20))
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "logs", "-f", task.id],
                            cwd=repo, stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(2)
        assert proc.poll() is None  # still running: keep following
        TaskLog(Layout.at(repo), task.id, actor="alice").write(
            VerifyFinished(passed=True, result="exit code 0", seconds=1))
        with open_board(Layout.at(repo)) as board:
            board.complete(task.id, claimed.lease.token)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert "committed abababababab" in out and "checks passed: exit code 0" in out


HOSTILE = "done \x1b]52;c;cHduZWQ=\x07 \x1b[2J\x1b[8mhidden\x1b[0m \x9b31m \u202eend"


def test_what_an_agent_wrote_reaches_the_terminal_with_its_control_characters_written_out(
        repo: Path) -> None:
    """A transcript holds what an agent and its commands wrote: an OSC 52 clipboard write,
    a screen clear or hidden text there must not act on the reader's terminal (`logs`,
    `logs --raw`, and `approve`'s line naming the command asked about); `--json` keeps the
    text as it is."""
    with open_board(Layout.at(repo)) as board:
        task = board.add("Fix it")
        run = board.claim("alice", task_id=task.id)  # a request is open while its run is
        assert run is not None and run.lease is not None
        board.requests.ask("permission", request_id="r-hostile", sender="alice",
                           task=task.id, body="may I?", tool="bash", subject=f"ls; {HOSTILE}",
                           token=run.lease.token)
    log = TaskLog(Layout.at(repo), task.id, actor="alice")
    log.write(TurnResponse(turn=1, content=[{"type": "text", "text": HOSTILE}]))
    log.write(ToolReturned(id="t1", name="bash", content=HOSTILE, is_error=False))
    log.write(Output(text=f"out: {HOSTILE}\n"))
    for args in (("logs", task.id), ("logs", task.id, "--raw"), ("approve", "r-hostile")):
        out = orch(repo, *args)
        assert out.returncode == 0, out.stderr
        text = out.stdout
        assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text, args
        assert "\u202e" not in text and "\\u202eend" in text, args  # a bidi override
        assert "\\x1b]52;c;cHduZWQ=\\x07" in text and "\\x1b[8mhidden" in text, args
    assert "approved bash(ls; done \\x1b]52" in text
    lines = orch(repo, "logs", task.id, "--json").stdout.splitlines()
    records = [json.loads(line) for line in lines]
    assert {"kind": "output", "text": f"out: {HOSTILE}\n"}.items() <= records[-1].items()


def test_unknown_and_hostile_records_are_shown_field_by_field(repo: Path) -> None:
    """The log is a file anyone can edit: a kind this version does not know, a record that
    does not fit its kind, or JSON nested too deeply is shown as it is, never a traceback."""
    with open_board(Layout.at(repo)) as board:
        task = board.add("Fix it")
    ts = b'"ts": "2026-01-01T10:00:01Z"'
    lines = [b"{" + ts + b', "kind": "from_the_future", "note": "hi"}',
             b"{" + ts + b', "kind": "agent_end", "outcome": "x", "turns": "many", '
                         b'"usage": "bogus"}',
             b'{"kind": "commit", "sha": 123}',
             b'{"kind": "claude_code", "message": {"type": "user", "message": {"content": 5}}}',
             b'["not", "a", "record"]',
             b'{"kind": "output", "text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
             b'{"kind": "commit", "sha": "0123456789abcdef"}']
    (Layout.at(repo).logs / f"{task.id}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    out = orch(repo, "logs", task.id)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "[10:00:01] from_the_future note=hi" in out.stdout
    assert 'agent_end outcome=x turns=many usage=bogus' in out.stdout
    assert "commit sha=123" in out.stdout and "committed 0123456789ab" in out.stdout
