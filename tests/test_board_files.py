"""What only the file board does: ``events.jsonl`` read where it lies (no index beside
it), torn lines in the log and the mailboxes, logs from before events had a seq. The
promises every board makes are in tests/conformance/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.board import init_repo, open_board
from orchestrator.board.eventlog import EventLog
from orchestrator.board.mailboxes import FileMailboxes
from orchestrator.events import LandNote, LandSkipped, Merged, TaskCreated


def test_a_torn_line_is_skipped_and_the_next_writer_starts_afresh(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", "t")
    for i in range(5):
        log.emit(LandNote(note=str(i)), "task_001")
    with log.path.open("ab") as fh:
        fh.write(b'{"seq": 99, "ts": "x", "ev')  # a writer killed mid-line
    assert [e.seq for e in log.read()] == [1, 2, 3, 4, 5] and log.last_seq() == 5
    after = log.emit(LandSkipped(reason="after"), "task_001")
    assert after.seq == 6
    assert [e.seq for e in log.read(task="task_001")] == [1, 2, 3, 4, 5, 6]
    assert [e.seq for e in log.tail(2, task="task_001")] == [5, 6]
    assert [e.seq for e in log.read(since=4)] == [5, 6] and log.last_seq() == 6


def test_lines_appended_by_another_writer_are_read_and_continued(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", "t")
    for i in range(10):
        log.emit(LandNote(note=str(i)), f"task_{i % 2 + 1:03d}")
    # lines appended by something else (an older version), in another key order
    with log.path.open("a") as fh:
        fh.write(json.dumps({"ts": "x", "seq": 11, "event": "late", "task": "task_002",
                             "actor": "old"}) + "\n")
    assert [e.event for e in log.read(since=10)] == ["late"]
    assert log.tail(1, task="task_002")[0].event == "late"
    assert log.emit(LandNote(note="next"), "task_001").seq == 12
    log.path.unlink()  # the log replaced: seqs start again from it
    log.emit(LandSkipped(reason="fresh"), "task_001")
    assert [e.event for e in log.read()] == ["land_skipped"]
    assert [e.seq for e in log.read(task="task_001")] == [1] and log.last_seq() == 1


def test_a_log_from_before_seq_reads_and_continues(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"ts": "a", "event": "task_created", "task": "task_001", "actor": "x"}\n'
                    '{"ts": "b", "event": "task_claimed", "task": "task_001", "actor": "x"}\n')
    log = EventLog(path, "t")
    assert [(e.seq, e.event) for e in log.read()] == [(0, "task_created"), (0, "task_claimed")]
    assert log.emit(Merged(strategy="merge", into="main", commit="c", branch="b", tip="t"),
                    "task_001").seq == 1
    assert [e.event for e in log.read(task="task_001")] == ["task_created", "task_claimed",
                                                            "merged"]
    assert [e.event for e in log.read(since=0)][-1] == "merged"
    assert [e.event for e in log.read(since=1)] == []


def test_odd_task_names_in_events_are_still_found(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", "t")
    log.emit(LandNote(note="x"), "task_0007")  # not the canonical task_007
    log.emit(LandNote(note="x"), "weird \" name")
    log.emit(LandNote(note="x"), "task_007")
    assert [e.task for e in log.read(task="task_0007")] == ["task_0007"]
    assert [e.task for e in log.read(task='weird " name')] == ['weird " name']
    assert [e.seq for e in log.read(task="task_007")] == [3]


def test_a_torn_mailbox_line_is_skipped(repo: Path) -> None:
    layout = init_repo(repo)
    boxes = FileMailboxes(layout)
    boxes.send("alice", "lead", "hello")
    with (layout.mailboxes / "alice.jsonl").open("a") as fh:
        fh.write('{"torn":')
    assert [m.body for m in boxes.unread("alice")] == ["hello"]
    boxes.send("alice", "bob", "again")  # on a line of its own, not joined to the fragment
    with open_board(layout) as board:
        assert [m.body for m in board.mailboxes.read("alice")] == ["hello", "again"]
        assert [m.body for m in board.mailboxes.unread("alice")] == ["hello", "again"]


def test_since_is_found_by_binary_search_over_lines_of_every_length(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.board import eventlog

    monkeypatch.setattr(eventlog, "CHUNK", 64)  # most lines are longer than a span
    log = EventLog(tmp_path / "events.jsonl", "t")
    for i in range(40):
        log.emit(LandNote(note="y" * (i * 7)), f"task_{i % 4 + 1:03d}")  # lines of every length
    with log.path.open("a") as fh:  # a foreign line and an older one in between
        fh.write('not json\n{"ts": "x", "event": "old", "task": "task_002", "actor": "o"}\n')
    log.emit(LandSkipped(reason="last"), "task_002")
    assert log.last_seq() == 41
    assert [e.seq for e in log.read(task="task_002")] == [2, 6, 10, 14, 18, 22, 26, 30, 34,
                                                          38, 0, 41]
    for since in range(42):
        assert [e.seq for e in log.read(since=since)] == list(range(since + 1, 42)) \
            if since else [*range(1, 41), 0, 41]
    assert [e.event for e in log.read(since=39)] == ["land_note", "land_skipped"]


def _by_scan(log: EventLog, task: str) -> list[int]:
    """Seqs of ``task``'s events, read line by line."""
    out = []
    for raw in log.path.read_bytes().splitlines():
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("task") == task:
            out.append(rec.get("seq", 0))
    return out


TASKS = ["task_001", "task_002", "task_778", "task_4294967294", "task_0007", 'odd "one"',
         "task_00", None]
"""Ids of every shape: ones that are a prefix of others, odd ones, no task."""


def test_one_tasks_events_agree_with_a_line_by_line_scan(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", "t", secrets=["s3cret-value"])
    log.emit(LandNote(note='"task": "task_002"'), "task_001")  # a field that looks like one
    log.emit_many([(TaskCreated(subject=str(i), source="s3cret-value"), TASKS[i % len(TASKS)])
                   for i in range(25)], actor="intake")
    with log.path.open("ab") as fh:
        fh.write(b'{"seq": 99, "ts": "x", "ev')  # a writer killed mid-line
    log.emit_many([(TaskCreated(subject=str(i)), TASKS[(i * 5) % len(TASKS)])
                   for i in range(30)])
    log.emit_many([])
    log.emit_many([(LandNote(note="last"), "task_001")])
    events = list(log.read())
    assert [e.seq for e in events] == list(range(1, 58)) and log.last_seq() == 57
    assert events[1].actor == "intake" and events[1].fields["source"] == "***"
    assert events[-1].fields == {"note": "last"}
    for task in TASKS[:-1]:
        seqs = _by_scan(log, task)
        assert seqs, task
        assert [e.seq for e in log.read(task=task)] == seqs, task
        assert [e.seq for e in log.tail(4, task=task)] == seqs[-4:], task
        assert [e.seq for e in log.read(task=task, since=seqs[len(seqs) // 2])] == \
            [s for s in seqs if s > seqs[len(seqs) // 2]], task
    assert [e.seq for e in log.read(task="task_003")] == []
    assert [e.seq for e in log.read(since=50)] == list(range(51, 58))
    assert [e.seq for e in log.tail(3)] == [55, 56, 57]
