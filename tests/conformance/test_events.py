"""Events: per-board seq, order, reads from a position and for one task, follow, tail,
secrets masked, many writers at once, a writer killed mid-write."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

import pytest

from orchestrator.controlplane import ControlPlane
from orchestrator.events import LandNote, LandSkipped, TaskClaimed
from tests.conformance.boards import Spec
from tests.conformance.conftest import finish, start_worker

Opener = Callable[..., ControlPlane]


def test_emit_returns_the_stored_event_with_the_next_seq(plane: ControlPlane) -> None:
    assert plane.events.last_seq() == 0 and list(plane.events.read()) == []
    first = plane.events.emit(LandNote(note="hello"), "task_001")
    second = plane.events.emit(LandSkipped(reason="2"), None, actor="bob")
    assert (first.seq, second.seq) == (1, 2)
    assert (first.event, first.task, first.actor, first["note"]) == ("land_note", "task_001",
                                                                    "cli", "hello")
    assert second.actor == "bob" and second.task is None and second.get("reason") == "2"
    assert [e.to_dict() for e in plane.events.read()] == [first.to_dict(), second.to_dict()]
    assert plane.events.last_seq() == 2
    assert first.decode() == LandNote(note="hello")


def test_read_since_task_and_tail(plane: ControlPlane) -> None:
    for i in range(30):
        plane.events.emit(LandNote(note=str(i)), f"task_{i % 3 + 1:03d}")
    assert [e.seq for e in plane.events.read(since=27)] == [28, 29, 30]
    assert list(plane.events.read(since=30)) == []
    mine = list(plane.events.read(task="task_002"))
    assert [e["note"] for e in mine] == [str(n) for n in range(1, 30, 3)]
    assert [e.seq for e in plane.events.read(since=20, task="task_002")] == [23, 26, 29]
    assert [e.seq for e in plane.events.tail(2)] == [29, 30]
    assert [e["note"] for e in plane.events.tail(2, task="task_001")] == ["24", "27"]
    assert plane.events.tail(0) == [] and list(plane.events.read(task="task_404")) == []


def test_follow_yields_the_past_then_new_events(plane: ControlPlane, opener: Opener) -> None:
    plane.events.emit(LandNote(note="before"))
    stop = threading.Event()
    got: list[str] = []

    def follow() -> None:
        for e in plane.events.follow(since=0, stop=stop, poll=0.02):
            got.append(e.event)
            if len(got) == 3:
                stop.set()

    t = threading.Thread(target=follow)
    t.start()
    other = opener("other")
    other.events.emit(LandSkipped(reason="after"), "task_001")
    other.events.emit(LandNote(note="later"))
    t.join(20)
    assert not t.is_alive() and got == ["land_note", "land_skipped", "land_note"]


def test_secrets_are_masked(spec: Spec, monkeypatch: pytest.MonkeyPatch,
                            opener: Opener) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-1234567890-secret")
    plane = opener("cli")
    e = plane.events.emit(LandNote(note="the token is tok-1234567890-secret"))
    assert "tok-1234567890" not in str(e.to_dict())
    assert "tok-1234567890" not in str([x.to_dict() for x in plane.events.read()])


def test_eight_processes_write_a_thousand_events_in_one_order(spec: Spec,
                                                               plane: ControlPlane) -> None:
    """1,000 events from 8 processes at once (every 5th a new task, then claimed): seq is
    strictly increasing in the log, and every task is created before it is claimed."""
    procs = [start_worker(spec, "events", f"w{i}", "125") for i in range(8)]
    results = [finish(p) for p in procs]
    events = list(plane.events.read())
    seqs = [e.seq for e in events]
    assert seqs == sorted(set(seqs)) and seqs[0] == 1
    assert len([e for e in events if e.event == "land_note"]) == 8 * 100
    created = {e.task: e.seq for e in events if e.event == "task_created"}
    claimed = {e.task: e.seq for e in events if e.event == "task_claimed"}
    assert len(created) == len(claimed) == 8 * 25
    assert all(created[t] < claimed[t] for t in claimed)
    for r in results:  # each writer saw its own seqs grow
        mine = r["seqs"]
        assert isinstance(mine, list) and mine == sorted(mine)


def test_a_writer_killed_mid_write_loses_nothing_else(spec: Spec, plane: ControlPlane) -> None:
    proc = start_worker(spec, "append-forever", "killed")
    assert proc.stdout is not None
    proc.stdout.readline()  # started
    deadline = time.monotonic() + 30
    while plane.events.last_seq() < 200 and time.monotonic() < deadline:
        plane.events.emit(LandNote(note="mine"), "task_002")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    after = plane.events.emit(LandSkipped(reason="after the kill"), "task_002")
    events = list(plane.events.read())
    seqs = [e.seq for e in events]
    assert seqs == sorted(set(seqs)) and events[-1].seq == after.seq
    assert [e.seq for e in plane.events.read(since=after.seq - 1)] == [after.seq]
    assert plane.events.tail(1, task="task_002")[0].event == "land_skipped"
    assert len(list(plane.events.read(task="task_001"))) >= 1


def test_every_event_of_a_tasks_life_is_its_typed_kind(plane: ControlPlane) -> None:
    """What the board writes itself (a claim's event is written in SQL on PostgreSQL, in
    the claim's one round trip) reads back as the typed kind `orchestrator.events`
    defines, with the claim's own token and attempt."""
    first, second = plane.add("one"), plane.add("two")
    claimed = plane.claim("alice")
    assert claimed is not None and claimed.lease is not None
    plane.complete(claimed.id, claimed.lease.token)
    again = plane.claim("bob")
    assert again is not None and again.lease is not None
    plane.fail(again.id, again.lease.token, "boom")
    kinds = [(e.event, e.decode()) for e in plane.events.read()]
    assert [k for k, typed in kinds if typed is None] == []
    claims = [typed for k, typed in kinds if k == "task_claimed"]
    assert claims == [TaskClaimed(owner="alice", token=claimed.lease.token, attempt=1),
                      TaskClaimed(owner="bob", token=again.lease.token, attempt=1)]
    assert {first.id, second.id} == {claimed.id, again.id}
