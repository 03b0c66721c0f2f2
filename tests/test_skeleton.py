from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.board.eventlog import EventLog
from orchestrator.config import Config
from orchestrator.errors import ConfigError, InvalidInput, InvalidTransition
from orchestrator.events import TaskCreated
from orchestrator.model import Status, Task, check_transition, format_task_id, parse_task_id


def test_task_ids_widen_past_999() -> None:
    assert format_task_id(7) == "task_007"
    assert format_task_id(1000) == "task_1000"
    assert parse_task_id("task_1000") == 1000
    assert parse_task_id("12") == 12
    with pytest.raises(InvalidInput):
        parse_task_id("../task_1")


def test_transitions_checked_in_one_place() -> None:
    check_transition("task_001", Status.PENDING, Status.IN_PROGRESS)
    with pytest.raises(InvalidTransition, match="cannot go from merged"):
        check_transition("task_001", Status.MERGED, Status.PENDING)
    with pytest.raises(ValueError):
        Task(id="task_1", subject="x")


def test_events_are_lines_and_torn_tail_is_skipped(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MY_API_KEY", "sk-very-secret-value")
    log = EventLog(tmp_path / "events.jsonl", actor="alice")
    log.emit(TaskCreated(subject="leaks sk-very-secret-value?"), "task_001")
    with (tmp_path / "events.jsonl").open("a") as fh:
        fh.write('{"ts": "torn')
    events = list(log.read())
    assert [e["event"] for e in events] == ["task_created"]
    assert events[0]["actor"] == "alice"
    assert "sk-very-secret-value" not in (tmp_path / "events.jsonl").read_text()


def test_config_layers(tmp_path: Path) -> None:
    (tmp_path / "orchestrator.toml").write_text("[board]\nlease_seconds = 12\n")
    cfg = Config.load(tmp_path, {"ORCH_TEAM_TEAMMATES": "4"})
    assert cfg.board.lease_seconds == 12 and cfg.team.teammates == 4
    with pytest.raises(ConfigError, match=r"board\.nope"):
        (tmp_path / "orchestrator.toml").write_text("[board]\nnope = 1\n")
        Config.load(tmp_path, {})


def test_cli_usage_error_exits_2_without_traceback() -> None:
    out = subprocess.run([sys.executable, "-m", "orchestrator", "nope"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
