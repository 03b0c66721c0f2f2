"""Intake: dropped files become tasks; bad ones are rejected with their reason, never lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.board import FileBoard, init_repo, open_board
from orchestrator.board.eventlog import EventLog
from orchestrator.board.intake import parse_drop
from orchestrator.errors import InvalidInput
from orchestrator.model import Status


@pytest.fixture
def board(repo: Path):
    with open_board(init_repo(repo)) as b:
        yield b


def drop(board: FileBoard, name: str, content: str | bytes, *, inbox: bool = True) -> Path:
    path = (board.layout.inbox if inbox else board.layout.tasks) / name
    data = content.encode() if isinstance(content, str) else content
    path.write_bytes(data)
    old = path.stat().st_mtime - 10  # settled: not being written any more
    os.utime(path, (old, old))
    return path


def rejected(board: FileBoard, name: str) -> str:
    """The reason written beside a rejected file (and the file is kept)."""
    assert (board.layout.rejected / name).exists() or (board.layout.rejected / name).is_symlink()
    return (board.layout.rejected / f"{name}.error.txt").read_text()


def test_json_as_people_write_it(board: FileBoard) -> None:
    board.add("existing")
    drop(board, "a.json", json.dumps({"title": "Fix login", "desc": "it 500s",
                                      "blockedBy": ["1"], "priority": 2, "team": "web"}))
    [t] = board.intake()
    assert (t.id, t.subject, t.description, t.blocked_by) == (
        "task_002", "Fix login", "it 500s", ["task_001"])
    assert t.priority == 2 and t.metadata == {"team": "web"} and t.source == "inbox/a.json"
    assert not (board.layout.inbox / "a.json").exists()
    assert board.get("task_002").subject == "Fix login"


def test_claude_code_task_file(board: FileBoard) -> None:
    board.add("a")
    board.add("b")
    drop(board, "1.json", json.dumps({
        "id": "7", "subject": "Write docs", "description": "all of it",
        "activeForm": "Writing docs", "status": "pending", "blocks": ["2"],
        "blockedBy": [], "owner": "someone", "metadata": {"k": "v"}}))
    [t] = board.intake()
    assert t.id == "task_007" and t.owner is None and t.lease is None
    assert t.metadata == {"activeForm": "Writing docs", "owner": "someone", "k": "v",
                          "blocks": ["task_002"]}
    assert board.get("task_002").blocked_by == ["task_007"]
    assert board.add("next").id == "task_008"  # the honoured id raised the high-water mark


def test_markdown_with_front_matter(board: FileBoard) -> None:
    board.add("a")
    drop(board, "fix.md", "---\npriority: 5\nblocked-by: [task_001]\nlabels: [ui, auth]\n"
                          "agent: reviewer\n---\n\n# Fix the login page\n\nIt returns 500.\n\n"
                          "- step one\n")
    [t] = board.intake()
    assert t.subject == "Fix the login page" and t.priority == 5 and t.agent == "reviewer"
    assert t.description == "It returns 500.\n\n- step one"
    assert t.blocked_by == ["task_001"] and t.metadata == {"labels": ["ui", "auth"]}


def test_plain_markdown_and_files_straight_in_tasks(board: FileBoard) -> None:
    drop(board, "note.md", "Just a line\nmore", inbox=False)
    [t] = board.intake()
    assert (t.subject, t.description, t.source) == ("Just a line", "more", "note.md")
    assert not (board.layout.tasks / "note.md").exists()


def test_hand_written_task_file_is_normalised_in_place(board: FileBoard) -> None:
    drop(board, "task_005.json", '{"title": "by hand"}', inbox=False)
    assert "task_005" in board.problems()
    [t] = board.intake()
    assert t.id == "task_005" and board.get("task_005").subject == "by hand"
    assert board.problems() == {}
    assert board.add("next").id == "task_006"


@pytest.mark.parametrize(("name", "content", "reason"), [
    ("bad.json", '{"title": "x",', "malformed JSON"),
    ("types.json", '{"title": "x", "priority": "high"}', "priority"),
    ("types2.json", '{"title": ["x"]}', "subject"),
    ("status.json", '{"title": "x", "status": "finished"}', "unknown status 'finished'"),
    ("binary.json", b"\x00\x01\x02{}", "binary"),
    ("latin.md", b"# caf\xe9", "not UTF-8"),
    ("empty.md", "  \n\n", "empty Markdown"),
    ("list.json", "[1, 2]", "JSON object"),
    ("notitle.json", '{"description": "x"}', "no 'title' or 'subject'"),
    ("escape.json", '{"title": "x", "id": "../../etc/passwd"}', "not a task id"),
    ("abs.json", '{"title": "x", "blockedBy": ["/etc/task_001"]}', "not a task id"),
    ("dotdot.json", '{"title": "x", "blocks": ["../task_001"]}', "not a task id"),
    ("prog.exe", "MZ", "unsupported file type"),
])
def test_bad_input_is_rejected_with_its_reason(board: FileBoard, name: str,
                                               content: str | bytes, reason: str) -> None:
    original = drop(board, name, content).read_bytes()
    good = drop(board, "good.json", '{"title": "still works"}')
    created = board.intake()
    assert [t.subject for t in created] == ["still works"]
    assert reason in rejected(board, name)
    assert (board.layout.rejected / name).read_bytes() == original
    [ev] = [e for e in EventLog(board.layout.events).read() if e["event"] == "task_rejected"]
    assert ev["file"] == f"inbox/{name}" and reason in ev["reason"]
    assert not good.exists()
    assert board.claim("w").subject == "still works"


def test_file_over_one_mib(board: FileBoard) -> None:
    drop(board, "big.json", json.dumps({"title": "x", "description": "a" * (1 << 20)}))
    assert board.intake() == []
    assert "over the 1 MiB limit" in rejected(board, "big.json")
    assert (board.layout.rejected / "big.json").stat().st_size > 1 << 20


def test_symlink_pointing_outside_the_repo(board: FileBoard, tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"title": "not yours"}')
    (board.layout.tasks / "evil.json").symlink_to(secret)
    (board.layout.tasks / "task_009.json").symlink_to(secret)
    (board.layout.inbox / "link.json").symlink_to(secret)
    assert board.intake() == []
    assert "outside the repository" in rejected(board, "evil.json")
    assert "outside the repository" in rejected(board, "link.json")
    assert "symlink" in rejected(board, "task_009.json")
    assert (board.layout.rejected / "evil.json").is_symlink()
    assert secret.read_text() == '{"title": "not yours"}'
    assert board.list() == [] and board.problems() == {}


def test_duplicate_id_is_rejected(board: FileBoard) -> None:
    board.add("first")
    drop(board, "dup.json", '{"id": "task_001", "title": "again"}')
    assert board.intake() == []
    assert "duplicate id task_001" in rejected(board, "dup.json")
    assert board.get("task_001").subject == "first"


def test_same_name_rejected_twice_keeps_both(board: FileBoard) -> None:
    drop(board, "x.json", "{")
    board.intake()
    drop(board, "x.json", "{{")
    board.intake()
    assert (board.layout.rejected / "x.json").read_text() == "{"
    assert (board.layout.rejected / "x.json.1").read_text() == "{{"
    assert (board.layout.rejected / "x.json.1.error.txt").exists()


def test_dependency_cycle_from_dropped_files_is_flagged(board: FileBoard) -> None:
    drop(board, "a.json", '{"id": 1, "title": "a", "blockedBy": [2]}')
    drop(board, "b.json", '{"id": 2, "title": "b", "blockedBy": [1]}')
    drop(board, "c.json", '{"title": "c", "blockedBy": [99]}')
    assert len(board.intake()) == 3
    probs = board.problems()
    assert "cycle" in probs["task_001"] and "cycle" in probs["task_002"]
    assert "task_099" in probs["task_003"]
    assert board.ready() == []


def test_a_file_still_being_written_waits(board: FileBoard) -> None:
    (board.layout.inbox / "slow.json").write_text('{"title": "hal')  # fresh mtime
    assert board.intake() == []
    assert (board.layout.inbox / "slow.json").exists()
    assert not (board.layout.rejected / "slow.json").exists()


def test_temp_and_hidden_files_are_ignored(board: FileBoard) -> None:
    drop(board, ".hidden.json", '{"title": "x"}')
    drop(board, "part.json.tmp", '{"title": "x"}')
    assert board.intake() == []
    assert (board.layout.inbox / ".hidden.json").exists()


def test_stale_processing_file_is_recovered(board: FileBoard) -> None:
    proc = board.layout.inbox / ".processing"
    proc.mkdir()
    (proc / "lost.json.999999999.abcd1234").write_text('{"title": "lost"}')
    [t] = board.intake()
    assert t.subject == "lost"


def test_parse_drop_errors_are_user_errors() -> None:
    with pytest.raises(InvalidInput, match="conflicts"):
        parse_drop("x.json", b'{"title": "a", "subject": "b"}')
    with pytest.raises(InvalidInput, match="never closed"):
        parse_drop("x.md", b"---\na: 1\n# t")


INTAKE_SCRIPT = """
import json, sys
from orchestrator.board import open_board
from orchestrator.layout import Layout
with open_board(Layout.at(sys.argv[1])) as b:
    print(json.dumps([t.source for t in b.intake()]))
"""


def test_concurrent_intake_takes_each_file_once(board: FileBoard) -> None:
    for i in range(40):
        drop(board, f"t{i:02d}.json", json.dumps({"title": f"t{i}"}))
    procs = [subprocess.Popen([sys.executable, "-c", INTAKE_SCRIPT, str(board.layout.root)],
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    sources = [s for p in procs for s in json.loads(p.communicate(timeout=60)[0])]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(sources) == sorted(f"inbox/t{i:02d}.json" for i in range(40))
    tasks = board.list()
    assert len(tasks) == 40 and len({t.id for t in tasks}) == 40
    assert all(t.status is Status.PENDING for t in tasks)
    assert list(board.layout.inbox.glob("*.json")) == []


@pytest.mark.parametrize(("content", "reason"), [
    ('{"id": "task_004", "subject": "x", "status": "bogus"}', "unknown status 'bogus'"),
    ("{not json", "malformed JSON"),
])
def test_broken_task_file_in_tasks_is_flagged_then_rejected(board: FileBoard, content: str,
                                                           reason: str) -> None:
    board.add("a")
    drop(board, "task_004.json", content, inbox=False)
    assert "unreadable task file" in board.problems()["task_004"]
    assert board.intake() == []
    assert reason in rejected(board, "task_004.json")
    assert (board.layout.rejected / "task_004.json").read_text() == content
    assert [t.id for t in board.list()] == ["task_001"] and board.problems() == {}


def test_a_hand_edited_check_result_of_the_wrong_shape_is_flagged(board: FileBoard) -> None:
    """A task's ``checks`` is a typed record: a value our checks never write is a problem
    named by its field, not a result every reader takes for "passed"."""
    board.add("a")
    drop(board, "task_002.json", '{"id": "task_002", "subject": "x", "checks": '
                                 '{"command": "make", "passed": "maybe"}}', inbox=False)
    assert "checks.passed: expected bool" in board.problems()["task_002"]
    assert [t.id for t in board.list()] == ["task_001"]


def test_a_burst_is_flushed_once_and_its_ids_stay_in_order(board: FileBoard,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """A burst of drops: no fsync per file, one flush of the file system, then the drops go;
    the id mark is written once, past every id given out."""
    import orchestrator.board.store as store
    import orchestrator.fsutil as fsutil

    board.add("before")
    flushes: list[Path] = []
    left: list[int] = []

    def flush(path: Path) -> None:  # at the flush every task is written, no drop deleted yet
        flushes.append(path)
        left.append(len(list((board.layout.inbox / ".processing").iterdir())))

    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(store, "sync_filesystem", flush)
    monkeypatch.setattr(fsutil.os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))
    for i in range(25):
        drop(board, f"d{i:02d}.json", json.dumps({"title": f"drop {i}"}))
    drop(board, "bad.json", "{broken")
    os.utime(board.layout.inbox / "bad.json", (0, 0))
    made = board.intake()
    assert [t.id for t in made] == [f"task_{n:03d}" for n in range(2, 27)]
    assert [t.subject for t in made] == [f"drop {i}" for i in range(25)]  # in name order
    assert flushes == [board.layout.tasks] and left == [25]
    assert len(fsyncs) <= 2  # only the rejected file's reason (file + folder), durably
    assert list((board.layout.inbox / ".processing").iterdir()) == []
    assert not any(p.name.startswith("d") for p in board.layout.inbox.iterdir())
    assert board.layout.seq.read_text() == "26\n"
    monkeypatch.undo()
    assert board.add("after").id == "task_027"


def test_a_burst_of_drops_lists_the_task_folder_once_and_keeps_the_log_open(
        board: FileBoard, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of drops on a board without an id mark yet lists the task files once (for
    the highest id), not once per drop; every drop gets its own id and its own event, and
    the ids go on from a hand-written file past them."""
    (board.layout.tasks / "task_007.json").write_text(
        json.dumps({"id": "task_007", "subject": "by hand"}))
    for i in range(30):
        (board.layout.inbox / f"d{i:02d}.json").write_text(json.dumps({"subject": f"drop {i}"}))
        os.utime(board.layout.inbox / f"d{i:02d}.json", (1, 1))
    listings = []
    real = FileBoard._highest_on_disk

    def counted(self: FileBoard) -> int:
        listings.append(1)
        return real(self)

    monkeypatch.setattr(FileBoard, "_highest_on_disk", counted)
    created = board.intake()
    assert len(listings) == 1 and len(created) == 30
    assert sorted(int(t.id[5:]) for t in created) == list(range(8, 38))
    events = [e for e in board.events.read() if e.event == "task_created"]
    assert sorted(e.task for e in events if e.task) == sorted(t.id for t in created)
    seqs = [e.seq for e in board.events.read()]
    assert seqs == list(range(1, len(seqs) + 1))  # dense and in order through the open log
    assert board.layout.seq.read_text().strip() == "37"


def test_a_fresh_drop_is_read_once_unless_it_changed_before_its_claim(
        board: FileBoard, monkeypatch: pytest.MonkeyPatch) -> None:
    """A drop younger than the settling time is read (and parsed) before it is claimed;
    the claimed file is not read again when it is the same file, unchanged, and is when
    it changed in between."""
    from orchestrator.board import intake

    reads: list[str] = []
    real_read = intake._read
    monkeypatch.setattr(intake, "_read", lambda p: (reads.append(p.name), real_read(p))[1])
    (board.layout.inbox / "a.json").write_text('{"title": "as written"}')  # fresh
    (board.layout.inbox / "b.json").write_text('{"title": "first"}')
    real_claim = intake._Claims.claim

    def claim(self: intake._Claims, path: Path) -> Path | None:
        if path.name == "b.json":  # rewritten between the first read and the claim
            path.write_text('{"title": "second, longer"}')
        return real_claim(self, path)

    monkeypatch.setattr(intake._Claims, "claim", claim)
    made = board.intake()
    assert [t.subject for t in made] == ["as written", "second, longer"]
    assert [name.partition(".json")[0] for name in reads] == ["b"]  # only the changed one


def test_an_id_mark_moved_by_another_process_mid_batch_is_honoured(
        board: FileBoard, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a batch ``.seq`` is not read again while it is the same file; when another
    process replaces it (its allocations, between two groups of tasks made together),
    the next id goes past its mark."""
    import orchestrator.board.intake as intake
    from orchestrator.board.index import staged_write

    monkeypatch.setattr(intake, "BATCH", 3)

    for i in range(6):
        drop(board, f"d{i}.json", json.dumps({"title": f"d{i}"}))
    real_write = FileBoard._write
    done: list[str] = []

    def write(self: FileBoard, task: object, **kw: object) -> None:
        real_write(self, task, **kw)  # type: ignore[arg-type]
        done.append(task.id)  # type: ignore[attr-defined]
        if len(done) == 3:  # another process gave out ids up to 100 meanwhile
            staged_write(board.layout.seq, "100\n")

    monkeypatch.setattr(FileBoard, "_write", write)
    made = board.intake()
    assert [t.id for t in made] == ["task_001", "task_002", "task_003", "task_101",
                                    "task_102", "task_103"]
    assert board.layout.seq.read_text() == "103\n"


KILLED_INTAKE = """
import sys
from orchestrator.board import open_board
from orchestrator.board.store import FileBoard
from orchestrator.layout import Layout
real = FileBoard._write
def write(self, task, **kw):
    real(self, task, **kw)
    if task.id == "task_%03d" % int(sys.argv[2]):
        print("written", flush=True)
        sys.stdin.readline()  # killed here, in the middle of its batch
FileBoard._write = write
with open_board(Layout.at(sys.argv[1])) as b:
    b.intake()
"""


def test_an_intake_killed_mid_batch_loses_no_drop(board: FileBoard) -> None:
    """kill -9 in the middle of a batch (its flush not done, no drop deleted): the next
    intake takes every drop still claimed again; no drop is lost, no id is given twice,
    every task has its task_created event, and the task files written before the kill
    are whole."""
    for i in range(40):
        drop(board, f"d{i:02d}.json", json.dumps({"title": f"drop {i}"}))
    with subprocess.Popen([sys.executable, "-c", KILLED_INTAKE, str(board.layout.root), "17"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "written\n"
        proc.kill()  # SIGKILL
        proc.wait(30)
    from orchestrator.board.intake import BATCH

    claimed = list((board.layout.inbox / ".processing").iterdir())
    left = len(list(board.layout.inbox.glob("d*.json")))
    assert len(claimed) + left == 40 and 17 <= len(claimed) <= 17 + BATCH  # none deleted
    assert len(list(board.layout.tasks.glob("task_*.json"))) == 17
    board.intake()
    assert list((board.layout.inbox / ".processing").iterdir()) == []
    assert list(board.layout.inbox.glob("*.json")) == []
    tasks = board.list()
    ids = [t.id for t in tasks]
    assert len(ids) == len(set(ids)) == 40 + 17  # the 17 taken twice (at least once)
    subjects = sorted(t.subject for t in tasks)
    assert sorted(set(subjects)) == sorted(f"drop {i}" for i in range(40))
    created: dict[str, list[str]] = {}  # each id's task_created subjects, oldest first
    for e in board.events.read():
        if e.event == "task_created":
            created.setdefault(e.task or "", []).append(e.fields["subject"])
    assert all(created[t.id][-1] == t.subject for t in tasks)  # its own event, the last
    # the killed process's last group logged its events before writing its files: those
    # ids were never written, and were given again
    assert sum(len(s) for s in created.values()) - len(tasks) <= BATCH
    assert int(board.layout.seq.read_text()) == max(int(i[5:]) for i in ids)


def test_tasks_made_together_answer_each_item_in_order(board: FileBoard,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`create_many`: each item gets its task or the error that kept it from being made
    (a protected field, an invalid value, an id taken on disk or earlier in the same
    group, a write that fails); the rest are made, their task_created events logged
    together in item order, a failed write's task_create_failed after them."""
    from orchestrator.errors import Conflict

    board.create({"subject": "already there"}, actor="t", task_id="task_009")
    real_write = FileBoard._write

    def write(self: FileBoard, task: object, **kw: object) -> None:
        if task.subject == "disk says no":  # type: ignore[attr-defined]
            raise OSError(28, "No space left on device")
        real_write(self, task, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(FileBoard, "_write", write)
    items: list[tuple[dict[str, Any], str | None, str | None]] = [
        ({"subject": "one"}, None, "a"),
        ({"subject": "owned", "owner": "mallory"}, None, None),
        ({"subject": "wanted"}, "task_020", None),
        ({"subject": "again"}, "task_020", None),
        ({"subject": "taken"}, "task_009", None),
        ({"subject": "bad", "priority": "high"}, None, None),
        ({"subject": "disk says no"}, None, None),
        ({"subject": "two"}, None, "b")]
    out = board.create_many(items, actor="intake")
    assert len(out) == len(items)
    made = {i: t for i, t in enumerate(out) if not isinstance(t, Exception)}
    assert {i: t.subject for i, t in made.items()} == {0: "one", 2: "wanted", 7: "two"}
    assert made[2].id == "task_020" and made[0].id != made[7].id
    assert isinstance(out[1], InvalidInput) and "owner" in str(out[1])
    assert isinstance(out[3], Conflict) and isinstance(out[4], Conflict)
    assert isinstance(out[5], InvalidInput) and isinstance(out[6], OSError)
    for t in made.values():
        assert board.get(t.id).subject == t.subject
    log = [e for e in board.events.read() if e.actor == "intake"]
    created = [e for e in log if e.event == "task_created"]
    assert [e.fields["subject"] for e in created] == ["one", "wanted", "disk says no", "two"]
    assert [e.seq for e in created] == list(range(created[0].seq, created[0].seq + 4))
    assert created[0].fields["source"] == "a" and created[3].fields["source"] == "b"
    assert [e.event for e in log][-1] == "task_create_failed"
    assert board.create_many([], actor="intake") == []


def test_a_disk_that_fills_mid_burst_keeps_every_drop_once(
        board: FileBoard, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills after the first group of tasks: intake stops with the error, the
    tasks made are kept and their drops are done with (not left claimed, to be taken in a
    second time after a restart); the other drops are back in the inbox, and the next
    intake, with room again, makes each of them once."""
    import errno

    from orchestrator.board.intake import BATCH

    for i in range(40):
        drop(board, f"d{i:02d}.json", json.dumps({"title": f"drop {i}"}))
    real_write = FileBoard._write
    room = [BATCH + 3]

    def write(self: FileBoard, task: object, **kw: object) -> None:
        if room[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        room[0] -= 1
        real_write(self, task, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(FileBoard, "_write", write)
    with pytest.raises(OSError, match="No space"):
        board.intake()
    made = len(list(board.layout.tasks.glob("task_*.json")))
    assert made == BATCH + 3
    assert list((board.layout.inbox / ".processing").iterdir()) == []
    assert len(list(board.layout.inbox.glob("d*.json"))) == 40 - made
    room[0] = 1000
    board.intake()
    subjects = sorted(t.subject for t in board.list())
    assert subjects == sorted(f"drop {i}" for i in range(40))  # each once
    assert list(board.layout.inbox.glob("*.json")) == []


def test_the_first_command_after_a_burst_reads_no_task_file(
        board: FileBoard, monkeypatch: pytest.MonkeyPatch) -> None:
    """Intake writes the burst's new tasks into the index (issue 34 item 5): a fresh
    process's list and status after it read no task file, as after any steady command,
    and its status does not even stat them (the index saw the folder as intake left it)."""
    from tests.helpers import count_task_reads

    for i in range(40):
        drop(board, f"d{i:02d}.json", json.dumps({"title": f"drop {i}"}))
    with open_board(board.layout) as taker:
        assert len(taker.intake(repair=False)) == 40
        reads = count_task_reads(monkeypatch)
    with open_board(board.layout) as fresh:
        assert fresh.summary().counts["pending"] == 40
        assert fresh._index.full_scans == 0
        assert [t.subject for t in fresh.list()] == [f"drop {i}" for i in range(40)]
    assert reads == []
