"""What only the file board does: the events index beside ``events.jsonl`` (rebuilt,
caught up, never trusted over the log), torn lines in the log and the mailboxes, logs
from before events had a seq. The promises every board makes are in tests/conformance/."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orchestrator.board import init_repo, open_board
from orchestrator.board.eventlog import EventLog
from orchestrator.board.mailboxes import FileMailboxes


def test_a_torn_line_is_skipped_and_the_next_writer_starts_afresh(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", "t")
    for i in range(5):
        log.emit("step", "task_001", n=i)
    with log.path.open("ab") as fh:
        fh.write(b'{"seq": 99, "ts": "x", "ev')  # a writer killed mid-line
    assert [e.seq for e in log.read()] == [1, 2, 3, 4, 5] and log.last_seq() == 5
    after = log.emit("after", "task_001")
    assert after.seq == 6
    assert [e.seq for e in log.read(task="task_001")] == [1, 2, 3, 4, 5, 6]
    os.remove(log.index_path)  # rebuilt from the log: the fragment is no event
    assert [e.seq for e in log.read(since=4)] == [5, 6] and log.last_seq() == 6


def test_the_index_follows_the_log_not_the_other_way(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", "t")
    for i in range(10):
        log.emit("step", f"task_{i % 2 + 1:03d}")
    # lines appended by something that does not keep the index (an older version)
    with log.path.open("a") as fh:
        fh.write(json.dumps({"seq": 11, "ts": "x", "event": "late", "task": "task_002",
                             "actor": "old"}) + "\n")
    assert [e.event for e in log.read(since=10)] == ["late"]
    assert log.tail(1, task="task_002")[0].event == "late"
    # an index of another log (the log was replaced) is rebuilt, not trusted
    index = log.index_path.read_bytes()
    log.path.unlink()
    log.emit("fresh", "task_001")
    assert [e.event for e in log.read()] == ["fresh"]
    log.index_path.write_bytes(index)  # stale: names the old inode
    assert [e.seq for e in log.read(task="task_001")] == [1] and log.last_seq() == 1


def test_a_log_from_before_seq_reads_and_continues(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"ts": "a", "event": "task_created", "task": "task_001", "actor": "x"}\n'
                    '{"ts": "b", "event": "task_claimed", "task": "task_001", "actor": "x"}\n')
    log = EventLog(path, "t")
    assert [(e.seq, e.event) for e in log.read()] == [(0, "task_created"), (0, "task_claimed")]
    assert log.emit("merged", "task_001").seq == 1
    assert [e.event for e in log.read(task="task_001")] == ["task_created", "task_claimed",
                                                            "merged"]
    assert [e.event for e in log.read(since=0)][-1] == "merged"
    assert [e.event for e in log.read(since=1)] == []


def test_odd_task_names_in_events_are_still_found(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", "t")
    log.emit("x", "task_0007")  # not the canonical task_007
    log.emit("x", "weird \" name")
    log.emit("x", "task_007")
    assert [e.task for e in log.read(task="task_0007")] == ["task_0007"]
    assert [e.task for e in log.read(task='weird " name')] == ['weird " name']
    assert [e.seq for e in log.read(task="task_007")] == [3]


def test_a_read_only_log_is_read_by_scanning(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", "t")
    log.emit("a", "task_001")
    log.index_path.unlink()
    os.chmod(tmp_path, 0o555)
    try:
        if os.access(tmp_path, os.W_OK):  # root ignores the mode
            return
        assert [e.event for e in log.read(task="task_001")] == ["a"]
        assert log.last_seq() == 1
    finally:
        os.chmod(tmp_path, 0o755)


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


def test_the_index_is_rebuilt_in_chunks_of_whole_lines(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.board import eventlog

    log = EventLog(tmp_path / "events.jsonl", "t")
    for i in range(40):
        log.emit("step", f"task_{i % 4 + 1:03d}", text="y" * (i * 7))  # lines of every length
    with log.path.open("a") as fh:  # a foreign line and an older one in between
        fh.write('not json\n{"ts": "x", "event": "old", "task": "task_002", "actor": "o"}\n')
    log.emit("last", "task_002")
    log.index_path.unlink()
    monkeypatch.setattr(eventlog, "CHUNK", 64)  # most lines are longer than a chunk
    assert log.last_seq() == 41
    assert [e.seq for e in log.read(task="task_002")] == [2, 6, 10, 14, 18, 22, 26, 30, 34,
                                                          38, 0, 41]
    assert [e.event for e in log.read(since=39)] == ["step", "last"]


def _by_scan(log: EventLog, task: str) -> list[int]:
    """Seqs of ``task``'s events, read line by line (no index, no key file)."""
    out = []
    for raw in log.path.read_bytes().splitlines():
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("task") == task:
            out.append(rec.get("seq", 0))
    return out


def _keys_cover_the_index(log: EventLog) -> bool:
    from orchestrator.board.eventlog import KEYS_HEAD, KW, W

    records = (log.index_path.stat().st_size - W) // W
    return log.keys_path.stat().st_size == KEYS_HEAD + KW * records


TASKS = ["task_001", "task_002", "task_778", "task_4294967294", "task_4294967295",
         "task_99999999999", "task_0007", 'odd "one"', None]
"""Small keys, keys at and past the key file's 4-byte cap, odd ids, no task."""


def test_one_tasks_events_come_from_the_key_file_and_agree_with_the_log(
        tmp_path: Path) -> None:
    import struct

    from orchestrator.board.eventlog import KEY_CAP, KEYS_HEAD, task_key

    log = EventLog(tmp_path / "events.jsonl", "t")
    for i in range(60):
        log.emit("step", TASKS[i % len(TASKS)], n=i)
    with log.hold():  # a burst of held appends (intake) keeps the key file in step too
        for i in range(60):
            log.emit("held", TASKS[(i * 7) % len(TASKS)])
    with log.path.open("a") as fh:  # lines of a writer that keeps no index (older version)
        for i in range(5):
            fh.write(json.dumps({"seq": 121 + i, "ts": "x", "event": "old",
                                 "task": "task_778", "actor": "o"}) + "\n")
    for task in TASKS[:-1]:  # the old lines are found before any writer indexes them
        assert [e.seq for e in log.read(task=task)] == _by_scan(log, task), task
    log.emit("after", "task_002")  # the next writer indexes them, and their keys
    assert _keys_cover_the_index(log)
    raw = log.keys_path.read_bytes()[KEYS_HEAD:]
    keys = struct.unpack(f"<{len(raw) // 4}I", raw)
    assert keys[:len(TASKS)] == tuple(min(task_key(t), KEY_CAP) for t in TASKS)
    assert keys[-6:] == (779,) * 5 + (3,)
    for task in TASKS[:-1]:
        seqs = _by_scan(log, task)
        assert seqs, task
        assert [e.seq for e in log.read(task=task)] == seqs, task
        assert [e.seq for e in log.tail(3, task=task)] == seqs[-3:], task
        assert [e.seq for e in log.read(task=task, since=seqs[len(seqs) // 2])] == \
            [s for s in seqs if s > seqs[len(seqs) // 2]], task
    assert [e.seq for e in log.read(task="task_003")] == []


def test_a_stale_torn_or_missing_key_file_is_never_trusted(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl", "t")
    for i in range(30):
        log.emit("step", TASKS[i % len(TASKS)])
    good = log.keys_path.read_bytes()

    def agree() -> None:
        for task in TASKS[:-1]:
            assert [e.seq for e in log.read(task=task)] == _by_scan(log, task), task
            assert [e.seq for e in log.tail(2, task=task)] == _by_scan(log, task)[-2:], task

    log.keys_path.unlink()  # readers fall back on the index; the next writer rebuilds it
    agree()
    log.emit("x", "task_001")
    assert _keys_cover_the_index(log)
    agree()
    log.keys_path.write_bytes(good + b"\xff\xff")  # torn, and longer than the index
    agree()
    log.emit("x", "task_002")
    assert _keys_cover_the_index(log)
    agree()
    log.keys_path.write_bytes(good[:20] + bytes(len(good) - 20))  # keys of other records
    log.index_path.unlink()  # an index rebuilt from the log starts its key file afresh
    agree()
    assert _keys_cover_the_index(log)
    # the log replaced: the old key file (another inode's) is ignored, then rebuilt
    old = log.keys_path.read_bytes()
    log.path.unlink()
    log.emit("fresh", "task_001")
    log.keys_path.write_bytes(old)
    assert [e.event for e in log.read(task="task_001")] == ["fresh"]
    log.emit("fresh", "task_001")
    assert _keys_cover_the_index(log)
    assert [e.seq for e in log.read(task="task_001")] == [1, 2]


def test_events_appended_together_read_as_if_appended_one_by_one(tmp_path: Path) -> None:
    """`emit_many` (a batch of new tasks: one write, one lock) gives consecutive seqs and
    keeps the index and key file in step, held or not, after a torn fragment too: every
    way of reading the log agrees with a line-by-line scan, and with a rebuilt index."""
    log = EventLog(tmp_path / "events.jsonl", "t", secrets=["s3cret-value"])
    log.emit("first", "task_001")
    log.emit_many([("made", TASKS[i % len(TASKS)], {"n": i, "note": "s3cret-value"})
                   for i in range(25)], actor="intake")
    with log.path.open("ab") as fh:
        fh.write(b'{"seq": 99, "ts": "x", "ev')  # a writer killed mid-line
    with log.hold():
        log.emit("held", "task_002")
        log.emit_many([("made", TASKS[(i * 5) % len(TASKS)], {"n": i}) for i in range(30)])
        log.emit_many([])
        log.emit("held", "task_001")
    log.emit_many([("made", "task_001", {"last": True})])
    events = list(log.read())
    assert [e.seq for e in events] == list(range(1, 60)) and log.last_seq() == 59
    assert [e.event for e in events[:3]] == ["first", "made", "made"]
    assert events[1].actor == "intake" and events[1].fields["note"] == "***"
    assert events[-1].fields == {"last": True} and _keys_cover_the_index(log)
    for task in TASKS[:-1]:  # (None: every event)
        seqs = _by_scan(log, task)
        assert [e.seq for e in log.read(task=task)] == seqs, task
        assert [e.seq for e in log.tail(4, task=task)] == seqs[-4:], task
    assert [e.seq for e in log.read(since=50)] == list(range(51, 60))
    os.remove(log.index_path)  # rebuilt from the log alone: the same events
    assert [e.seq for e in log.read()] == list(range(1, 60))
    for task in TASKS[:-1]:  # (None: every event)
        assert [e.seq for e in log.read(task=task)] == _by_scan(log, task), task
