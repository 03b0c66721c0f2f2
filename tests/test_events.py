"""The event kinds (`orchestrator.events`): a producer's kind is written as the JSON line
the log always had, and a line read back (old, of a kind this code does not know, or
hand-edited) decodes to its kind or to None, never to an exception."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from orchestrator.board.eventlog import EventLog
from orchestrator.events import (
    KINDS,
    LandVerified,
    Spend,
    TaskClaimed,
    TaskFailed,
    TaskStatusSet,
    WorktreeKept,
    event_status,
)
from orchestrator.model import Usage

COLUMNS = {"seq", "ts", "event", "task", "actor"}


def test_a_kind_is_written_as_the_columns_then_its_fields(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", "alice")
    kinds = [TaskStatusSet(from_="pending", to="cancelled"),
             WorktreeKept(path="/w/task_001", branch=None),  # no snapshot: left out
             LandVerified(commit="c0ffee", command="make", seconds=1.5, together=None),
             Spend(usage=Usage(input_tokens=10, cost_usd=0.5), plan=None)]  # a record inside
    for kind in kinds:
        log.emit(kind, "task_001")
    lines = [json.loads(line) for line in log.path.read_text().splitlines()]
    assert all(isinstance(line.pop("ts"), str) for line in lines)
    assert [list(line.items()) for line in lines] == [
        [("seq", 1), ("event", "task_status"), ("task", "task_001"),
         ("actor", "alice"), ("from", "pending"), ("to", "cancelled")],
        [("seq", 2), ("event", "worktree_kept"), ("task", "task_001"),
         ("actor", "alice"), ("path", "/w/task_001"), ("branch", None)],
        [("seq", 3), ("event", "land_verified"), ("task", "task_001"),
         ("actor", "alice"), ("commit", "c0ffee"), ("command", "make"), ("seconds", 1.5),
         ("together", None)],
        [("seq", 4), ("event", "spend"), ("task", "task_001"), ("actor", "alice"),
         ("usage", {"input_tokens": 10, "output_tokens": 0, "cache_read_tokens": 0,
                    "cache_write_tokens": 0, "cost_usd": 0.5, "seconds": 0.0}),
         ("plan", None)]]
    assert [e.decode() for e in log.read()] == kinds
    assert [event_status(e) for e in log.read()] == ["cancelled", None, None, None]
    # a value of the wrong type that mypy could not see is refused, not written
    with pytest.raises(TypeError, match=r"task_claimed: Expected `int`, got `str` - at `\$.token`"):
        log.emit(TaskClaimed(owner="alice", token=json.loads('"7"'), attempt=1), "task_001")
    with pytest.raises(TypeError, match="emit takes an event kind"):
        log.emit("task_claimed", "task_001")  # type: ignore[arg-type]  # the old form
    assert log.last_seq() == 4


def test_old_unknown_and_hand_edited_lines_decode_to_none(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    claimed = {"event": "task_claimed", "task": "task_001", "actor": "a", "owner": "a",
               "token": 7, "attempt": 1}
    lines = [
        {"ts": "t", "event": "teammate_idle", "task": None, "actor": "lead", "n": 1},  # gone
        {**claimed, "seq": 1, "token": "7"},  # a wrong type
        {**claimed, "seq": 2, "machine": "m1", "extra": [1]},  # fields it does not know
        {**claimed, "seq": 3, "owner": None},
        {"seq": 4, "event": ["task_failed"], "task": "task_001", "actor": "a"},
        {"seq": 5, "event": "task_status", "task": "task_001", "from": "pending",
         "to": {"status": "review"}},
        {"seq": 6, "event": "task_failed", "task": "task_001", "token": 1, "error": "x",
         "attempts": 3},  # no status
        {"seq": 7, "event": "EventKind", "task": "task_001"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    events = list(EventLog(path).read())
    assert [e.decode() for e in events] == [
        None, None, TaskClaimed(owner="a", token=7, attempt=1), None, None, None, None, None]
    assert [event_status(e) for e in events] == [
        None, None, "in_progress", None, None, None, None, None]
    assert events[0].to_dict()["n"] == 1  # still read and shown as it is
    assert TaskFailed(token=1, error="x", attempts=3, status="failed").sets() == "failed"


def test_no_kind_can_write_over_a_column_and_each_tag_is_one_kind() -> None:
    for kind in KINDS:
        assert not {f.encode_name for f in msgspec.structs.fields(kind)} & COLUMNS, kind
    tags = [k.__struct_config__.tag for k in KINDS]
    assert len(set(tags)) == len(tags) and all(isinstance(t, str) for t in tags)
