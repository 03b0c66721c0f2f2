"""Mailboxes, task logs, teammate status, permission/plan requests, and claims by
several processes — the rest of the control plane, against each implementation."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from orchestrator.controlplane import ControlPlane
from orchestrator.errors import InvalidInput, NotFound
from orchestrator.transcript import Commit, Output, ToolCall, VerifyFinished
from tests.conformance.boards import Spec
from tests.conformance.conftest import finish, start_worker

Opener = Callable[..., ControlPlane]


def test_mailboxes_keep_order_and_per_reader_positions(plane: ControlPlane,
                                                       opener: Opener) -> None:
    other = opener("alice")
    sent = [plane.mailboxes.send("alice", "lead", f"m{i}", task="task_001") for i in range(3)]
    assert len({m.id for m in sent}) == 3 and sent[0].to == "alice"
    assert [m.body for m in other.mailboxes.unread("alice")] == ["m0", "m1", "m2"]
    other.mailboxes.ack("alice", sent[1].id)
    assert [m.body for m in other.mailboxes.unread("alice")] == ["m2"]
    assert [m.body for m in plane.mailboxes.unread("alice", "watcher")] == ["m0", "m1", "m2"]
    assert [m.body for m in plane.mailboxes.read("alice")] == ["m0", "m1", "m2"]  # kept
    got = plane.mailboxes.find("alice", body="m1")
    assert [(m.sender, m.get("from"), m.get("task")) for m in got] == [
        ("lead", "lead", "task_001")]
    plane.mailboxes.send("alice", "bob", "later", kind="shutdown_request", request_id="r1")
    assert [m.kind for m in other.mailboxes.unread("alice")] == ["message", "shutdown_request"]
    assert plane.mailboxes.read("nobody") == [] and plane.mailboxes.unread("nobody") == []


@pytest.mark.parametrize("bad", ["../x", "", "a/b", ".hidden", "x" * 65])
def test_bad_mailbox_names_are_refused(plane: ControlPlane, bad: str) -> None:
    with pytest.raises(InvalidInput):
        plane.mailboxes.send(bad, "lead", "hi")


def test_task_logs_append_read_follow(plane: ControlPlane, opener: Opener) -> None:
    assert not plane.logs.exists("task_001") and list(plane.logs.read("task_001")) == []
    w = plane.logs.writer("task_001", actor="alice")
    w.write(Output(text="x" * 100))
    plane.logs.append("task_001", Commit(sha="abc"))
    plane.logs.append("task_001.sub-1", Output(text="sub"))
    # a record's fields may use any key, the log's own parameter names too (a tool call's name)
    w.write(ToolCall(name="bash", id="t1", input={}))
    plane.logs.append("task_001.sub-1", ToolCall(name="read", id="t2", input={}))
    recs = list(opener("other").logs.read("task_001"))
    assert [(r.kind, r.actor) for r in recs] == [("output", "alice"), ("commit", None),
                                                 ("tool_call", "alice")]
    assert recs[2]["name"] == "bash" and recs[2]["id"] == "t1"
    assert [r.get("name") for r in plane.logs.read("task_001.sub-1")] == [None, "read"]
    assert recs[1]["sha"] == "abc" and plane.logs.exists("task_001")
    assert plane.logs.names("task_001.sub-") == ["task_001.sub-1"]
    stop = threading.Event()
    seen: list[str] = []

    def follow() -> None:
        for r in plane.logs.follow("task_001", stop=stop, poll=0.02):
            seen.append(r.kind)
            if len(seen) == 4:
                stop.set()

    t = threading.Thread(target=follow)
    t.start()
    opener("again").logs.append("task_001", VerifyFinished(passed=True, result="ok", seconds=1))
    t.join(20)
    assert not t.is_alive() and seen == ["output", "commit", "tool_call", "verify_finished"]
    with pytest.raises(InvalidInput):
        plane.logs.append("../escape", Commit(sha="x"))


def test_teammate_status_publish_get_all_remove(plane: ControlPlane, opener: Opener) -> None:
    assert plane.team.all() == [] and plane.team.get("alice") is None
    st = plane.team.publish("alice", "working", pid=123, task="task_001", backend_pgid=9,
                            since="2026-01-01T00:00:00Z")
    assert st.updated_at and st.state == "working"
    opener("bob").team.publish("bob", "idle", pid=124)
    got = opener("reader").team.get("alice")
    assert got is not None and (got.pid, got.task, got.backend_pgid) == (123, "task_001", 9)
    assert [s.name for s in plane.team.all()] == ["alice", "bob"]
    plane.team.publish("alice", "stopped", exit="exit code 1")
    alice = plane.team.get("alice")
    assert alice is not None and alice.state == "stopped" and alice.task is None
    assert alice.exit == "exit code 1"
    plane.team.remove("alice")
    assert [s.name for s in plane.team.all()] == ["bob"]


def test_requests_ask_answer_once_and_wait(spec: Spec, plane: ControlPlane) -> None:
    asker = start_worker(spec, "ask", "alice", "req-1")
    assert asker.stdout is not None
    asker.stdout.readline()  # asked
    [req] = plane.requests.pending()
    assert (req.id, req.kind, req.sender, req.body, req.fields.get("tool")) == (
        "req-1", "permission", "alice", "Bash(make)", "Bash")
    assert plane.requests.answer_of("req-1") is None
    plane.requests.answer("req-1", approved=True, message="go", actor="me")
    assert finish(asker) == {"approved": True, "message": "go"}
    assert plane.requests.pending() == []
    answer = plane.requests.answer_of("req-1")
    assert answer is not None and answer.approved and answer.by == "me"
    with pytest.raises(NotFound):
        plane.requests.answer("req-1", approved=False)  # answered already
    with pytest.raises(NotFound):
        plane.requests.answer("nope", approved=True)
    plane.requests.ask("plan", request_id="p-1", sender="bob", task="task_002", body="a plan",
                       plan="1. do it")
    assert [(r.kind, r.fields.get("plan")) for r in plane.requests.pending()] == [
        ("plan", "1. do it")]
    stop = threading.Event()
    stop.set()
    assert plane.requests.wait("p-1", stop=stop) is None
    assert plane.requests.wait("p-1", timeout=0.05) is None


def test_four_processes_claim_each_task_exactly_once(spec: Spec, plane: ControlPlane) -> None:
    for i in range(40):
        plane.add(f"t{i}")
    procs = [start_worker(spec, "claim-all", f"w{i}") for i in range(4)]
    won = [tid for p in procs for tid in finish(p)["won"]]  # type: ignore[attr-defined]
    assert sorted(won) == sorted(t.id for t in plane.list())
    claimed = [e.task for e in plane.events.read() if e.event == "task_claimed"]
    assert sorted(claimed) == sorted(won)
