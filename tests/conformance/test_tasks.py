"""Tasks: add/get/list, claims, leases, fencing, requeue, readiness and problems —
the promises every board makes (run against each implementation)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from orchestrator.controlplane import ControlPlane
from orchestrator.errors import InvalidInput, InvalidTransition, LeaseLost, NotFound
from orchestrator.model import Status
from tests.conformance.boards import Spec, open_spec

Opener = Callable[..., ControlPlane]


def test_implements_the_protocol(plane: ControlPlane) -> None:
    assert isinstance(plane, ControlPlane)


def test_add_get_list_and_sequential_ids(plane: ControlPlane) -> None:
    a = plane.add("first", description="d")
    b = plane.add("second", priority=3)
    assert (a.id, b.id) == ("task_001", "task_002")
    assert plane.get("1").subject == "first"
    assert plane.get("task_002").priority == 3
    assert [t.id for t in plane.list()] == ["task_001", "task_002"]
    assert plane.list(Status.IN_PROGRESS) == []
    assert events(plane) == ["task_created", "task_created"]
    assert plane.ids.high_water() == 2
    assert plane.ids.next() == "task_003"
    assert plane.add("third").id == "task_004"  # an id reserved is never handed out again


def test_list_in_pages_by_id(plane: ControlPlane) -> None:
    """``after``/``limit`` page through `list` (a keyset: the next page starts after the last
    id shown, which need not exist); the pages together are the whole list."""
    for i in range(12):
        plane.add(f"t{i}")
    for tid in ("task_003", "task_008", "task_011"):
        plane.cancel(tid)
    pending = [t.id for t in plane.list(Status.PENDING)]
    assert len(pending) == 9
    pages, after = [], None
    while page := plane.list(Status.PENDING, after=after, limit=4):
        assert len(page) <= 4
        pages.append([t.id for t in page])
        after = page[-1].id
    assert [len(p) for p in pages] == [4, 4, 1] and [i for p in pages for i in p] == pending
    assert [t.id for t in plane.list(after="task_010")] == ["task_011", "task_012"]
    assert [t.id for t in plane.list([Status.CANCELLED, Status.PENDING], after="9",
                                     limit=2)] == ["task_010", "task_011"]
    assert plane.list(after="task_500") == [] and plane.list(limit=0) == []
    assert [t.id for t in plane.list(limit=1)] == ["task_001"]
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidInput):
            plane.list(limit=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        plane.list(after="../task_001")


def test_ids_are_unique_across_handles(plane: ControlPlane, opener: Opener) -> None:
    others = [opener(f"o{i}") for i in range(3)]
    got = [h.ids.next() for _ in range(5) for h in (plane, *others)]
    assert len(set(got)) == len(got) == 20


def events(plane: ControlPlane) -> list[str]:
    return [e.event for e in plane.events.read()]


def test_unknown_ids_and_blockers(plane: ControlPlane) -> None:
    with pytest.raises(NotFound):
        plane.get("task_404")
    with pytest.raises(InvalidInput):
        plane.get("../../etc/passwd")
    with pytest.raises(InvalidInput):
        plane.get("/abs/task_001")
    with pytest.raises(NotFound, match="task_009"):
        plane.add("x", blocked_by=["task_009"])
    with pytest.raises(InvalidInput):
        plane.add("x", blocked_by=["../task_001"])
    assert plane.list() == []


def test_claim_order_priority_then_id(plane: ControlPlane) -> None:
    plane.add("low")
    plane.add("high", priority=5)
    plane.add("low2")
    order = [plane.claim("w").id for _ in range(3)]
    assert order == ["task_002", "task_001", "task_003"]
    assert plane.claim("w") is None


def test_claim_sets_lease_and_token_one_higher(plane: ControlPlane) -> None:
    t = plane.add("x")
    c = plane.claim("alice", lease_seconds=60)
    assert c is not None and c.id == t.id
    assert c.status is Status.IN_PROGRESS and c.owner == "alice"
    assert c.lease is not None and c.lease.token == 1 == c.fence
    plane.release(c.id, 1, reason="stop")
    c2 = plane.claim("bob")
    assert c2 is not None and c2.lease.token == 2
    assert c2.attempts == 0  # release does not count


def test_fencing_refuses_old_tokens_and_changes_nothing(plane: ControlPlane) -> None:
    plane.add("x")
    first = plane.claim("alice", lease_seconds=0.05)
    time.sleep(0.1)
    assert [t.id for t in plane.requeue_expired()] == [first.id]
    second = plane.claim("bob")
    assert second.lease.token == 2
    before = plane.get(first.id)
    for call in (lambda: plane.complete(first.id, 1), lambda: plane.renew(first.id, 1),
                 lambda: plane.update(first.id, 1, branch="x"),
                 lambda: plane.fail(first.id, 1, "boom"),
                 lambda: plane.release(first.id, 1)):
        with pytest.raises(LeaseLost, match="token 1"):
            call()
    assert plane.get(first.id) == before
    done = plane.complete(first.id, 2, branch="task/001-x")
    assert done.status is Status.REVIEW and done.lease is None and done.owner is None
    assert done.branch == "task/001-x"
    with pytest.raises(LeaseLost):
        plane.complete(first.id, 2)


def test_renew_extends_the_lease(plane: ControlPlane) -> None:
    plane.add("x")
    c = plane.claim("alice", lease_seconds=0.2)
    renewed = plane.renew(c.id, c.lease.token, lease_seconds=60)
    assert renewed.lease.expires_at > c.lease.expires_at + 30
    assert plane.requeue_expired(now=time.time() + 1) == []


def test_fail_counts_attempts_then_failed(plane: ControlPlane) -> None:
    plane.add("x")  # max_attempts=2 from the config
    c = plane.claim("a")
    t = plane.fail(c.id, c.lease.token, "tests failed")
    assert t.status is Status.PENDING and t.attempts == 1 and t.error == "tests failed"
    c = plane.claim("a")
    t = plane.fail(c.id, c.lease.token, "again")
    assert t.status is Status.FAILED and t.attempts == 2
    assert plane.claim("a") is None


def test_fail_without_retry_is_final_at_once(plane: ControlPlane) -> None:
    plane.add("x")
    c = plane.claim("a")
    assert plane.fail(c.id, c.lease.token, "no backend", retry=False).status is Status.FAILED


def test_requeue_expired_keeps_worktree_and_counts(plane: ControlPlane) -> None:
    plane.add("x")
    c = plane.claim("a", lease_seconds=30)
    plane.update(c.id, c.lease.token, worktree="/w/task_001", branch="task/001-x")
    assert plane.requeue_expired() == []
    [t] = plane.requeue_expired(now=time.time() + 31)
    assert t.status is Status.PENDING and t.attempts == 1 and t.lease is None
    assert t.worktree == "/w/task_001" and t.branch == "task/001-x"
    c = plane.claim("b", lease_seconds=30)
    [t] = plane.requeue_expired(now=time.time() + 31)
    assert t.status is Status.FAILED
    assert "lease_expired" in events(plane)


def test_requeue_owner(plane: ControlPlane) -> None:
    plane.add("x")
    plane.add("y")
    plane.claim("alice")
    plane.claim("bob")
    [t] = plane.requeue_owner("alice", reason="process died")
    assert t.id == "task_001" and t.attempts == 1 and t.status is Status.PENDING
    assert plane.get("task_002").owner == "bob"


def test_cancel_and_transitions(plane: ControlPlane) -> None:
    plane.add("x")
    c = plane.claim("a")
    t = plane.cancel(c.id)
    assert t.status is Status.CANCELLED and t.lease is None
    with pytest.raises(LeaseLost):
        plane.complete(c.id, c.lease.token)
    with pytest.raises(InvalidTransition):
        plane.cancel(c.id)
    with pytest.raises(InvalidTransition):
        plane.set_status(c.id, Status.PENDING, actor="me")


def test_set_status_and_edit(plane: ControlPlane) -> None:
    plane.add("x")
    c = plane.claim("a")
    plane.complete(c.id, c.lease.token)
    t = plane.set_status(c.id, Status.PENDING, actor="lead", feedback=["use a dict"])
    assert t.status is Status.PENDING and t.feedback == ["use a dict"]
    t = plane.edit(c.id, actor="me", priority=7, metadata={"k": 1})
    assert (t.priority, t.metadata) == (7, {"k": 1})
    with pytest.raises(InvalidInput):
        plane.edit(c.id, actor="me", status="review")
    with pytest.raises(InvalidInput):
        plane.edit(c.id, actor="me", priority="high")
    with pytest.raises(InvalidInput):
        plane.edit(c.id, actor="me", nonsense=1)
    with pytest.raises(InvalidInput, match="only a claim"):
        plane.set_status(c.id, Status.IN_PROGRESS, actor="me")
    with pytest.raises(InvalidInput):
        plane.set_status(c.id, Status.CANCELLED, actor="me", owner="x")
    assert plane.get(c.id).priority == 7
    assert "task_status" in events(plane)


def test_readiness_through_blockers(plane: ControlPlane) -> None:
    a = plane.add("a")
    b = plane.add("b", blocked_by=[a.id], priority=9)
    assert [t.id for t in plane.ready()] == [a.id]
    c = plane.claim("w")
    assert plane.claim("w") is None
    plane.complete(c.id, c.lease.token)
    assert [t.id for t in plane.ready()] == [b.id]


def test_cycles_and_missing_blockers_are_problems(plane: ControlPlane) -> None:
    a = plane.add("a")
    b = plane.add("b", blocked_by=[a.id])
    c = plane.add("c", blocked_by=[b.id])
    plane.edit(a.id, actor="me", blocked_by=[b.id])
    d = plane.add("d")
    plane.edit(d.id, actor="me", blocked_by=["task_077"])
    probs = plane.problems()
    assert "cycle" in probs[a.id] and "cycle" in probs[b.id]
    assert "task_077" in probs[d.id] and "does not exist" in probs[d.id]
    assert b.id in probs[c.id]
    assert plane.ready() == []
    assert plane.claim("w") is None
    plane.cancel(c.id)
    assert c.id not in plane.problems()


def test_another_handle_sees_changes(plane: ControlPlane, opener: Opener) -> None:
    other = opener("other")
    assert other.list() == []
    plane.add("x")
    assert [t.id for t in other.list()] == ["task_001"]
    c = plane.claim("a")
    assert other.claim("b") is None
    assert other.list(Status.IN_PROGRESS)[0].owner == "a"
    plane.complete(c.id, c.lease.token)
    assert other.get(c.id).status is Status.REVIEW


def test_a_waiting_teammate_wakes_when_its_blocker_reaches_review(spec: Spec,
                                                                  plane: ControlPlane) -> None:
    """Woken by the change itself (the rescan is 30 s away), not by another's claim."""
    waiter = open_spec({**spec, "board": {**spec["board"], "rescan_seconds": 30}}, "waiter")
    try:
        a = plane.add("blocker")
        plane.add("blocked", blocked_by=[a.id])
        c = plane.claim("alice")
        assert c is not None and c.id == a.id and c.lease is not None
        woke: list[tuple[bool, float]] = []
        t = threading.Thread(target=lambda: woke.append((waiter.wait_for_ready(20),
                                                         time.monotonic())))
        t.start()
        time.sleep(0.5)
        assert not woke  # nothing is ready: it waits
        t0 = time.monotonic()
        plane.complete(a.id, c.lease.token)
        t.join(20)
        assert woke and woke[0][0] is True and woke[0][1] - t0 < 3.0
    finally:
        waiter.close()


def test_wait_for_ready_wakes_on_a_new_task(plane: ControlPlane, opener: Opener) -> None:
    assert plane.wait_for_ready(0.05) is False
    opener("other").add("x")
    assert plane.wait_for_ready(5) is True




def test_summary_counts_what_list_holds(plane: ControlPlane, opener: Opener) -> None:
    """`summary` answers what summing `list` would, on this handle and on one opened
    before the changes (which must pick up another handle's writes)."""
    from orchestrator.model import Usage
    from orchestrator.team.status import board_counts

    other = opener("other")
    empty = other.summary()
    assert empty.counts == board_counts([]) and (empty.cost_usd, empty.tokens) == (0.0, 0)
    for subject in ("a", "b", "c", "d"):
        plane.add(subject)
    a = plane.claim("alice")
    assert a is not None and a.lease is not None
    plane.update(a.id, a.lease.token, usage=Usage(input_tokens=1000, output_tokens=200,
                                                  cache_read_tokens=30, cost_usd=0.125))
    plane.complete(a.id, a.lease.token)
    b = plane.claim("bob")
    assert b is not None and b.lease is not None
    plane.update(b.id, b.lease.token, usage=Usage(output_tokens=5, cost_usd=0.000001))
    plane.fail(b.id, b.lease.token, "needs a person", retry=False)
    # an old writer's string: read as the typed wait it names (orchestrator.waits)
    plane.edit(b.id, actor="lead", waiting_for="budget: $1.00 of $1.00 spent")
    plane.cancel("task_004")
    for handle in (plane, other):
        s = handle.summary()
        tasks = handle.list()
        assert s.counts == board_counts(tasks) and sum(s.counts.values()) == 4
        assert s.counts["review"] == s.counts["failed"] == s.counts["cancelled"] == 1
        assert s.cost_usd == round(sum(t.usage.cost_usd for t in tasks), 6) == 0.125001
        assert s.tokens == sum(t.usage.tokens for t in tasks) == 1235
        assert s.waiting == [(b.id, "budget reached: $1.00 of $1.00 spent")]
    plane.set_status(b.id, Status.PENDING, actor="cli")  # a retry: no longer waiting
    assert other.summary().waiting == [] and other.summary().counts["pending"] == 2
