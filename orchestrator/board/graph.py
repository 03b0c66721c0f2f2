"""Readiness through ``blocked_by``, and why a task can never become ready.

A task is ready when it is pending and every blocker is in review or merged.
A pending task whose blockers can never get there (a cycle, a blocker that
does not exist or was cancelled/discarded, or one that is itself stuck) is a
*problem*: the board shows it with the reason instead of waiting forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import attrgetter

from orchestrator.model import FINAL, Status, Task

DEAD_ENDS = (Status.CANCELLED, Status.DISCARDED)


def is_ready(task: Task, tasks: Mapping[str, Task]) -> bool:
    if task.status is not Status.PENDING:
        return False
    for b in task.blocked_by:
        blocker = tasks.get(b)
        if blocker is None or not blocker.status.satisfies_blockers:
            return False
    return True


def find_problems(tasks: Mapping[str, Task]) -> dict[str, str]:
    """Task id -> reason, for every pending task that can never become ready."""
    problems: dict[str, str] = {}
    # Only a task with blockers can have a problem or be on a cycle: on a big board that
    # is a few of them, picked out without a Python step per task.
    waiting = {t.id: t for t in filter(_has_blockers, tasks.values())}
    for tid in _cycle_members(waiting, tasks):
        problems[tid] = f"dependency cycle: {' -> '.join(_cycle_path(tid, tasks))}"
    for tid, task in waiting.items():
        if tid in problems or task.status in FINAL:
            continue
        for b in task.blocked_by:
            blocker = tasks.get(b)
            if blocker is None:
                problems[tid] = f"blocked by {b}, which does not exist"
            elif blocker.status in DEAD_ENDS:
                problems[tid] = f"blocked by {b}, which is {blocker.status}"
            else:
                continue
            break
    # Stuck blockers make their dependants stuck too (until nothing new is found).
    changed = True
    while changed:
        changed = False
        for tid, task in waiting.items():
            if tid in problems or task.status is not Status.PENDING:
                continue
            stuck = next((b for b in task.blocked_by if b in problems
                          and not tasks[b].status.satisfies_blockers), None)
            if stuck is not None:
                problems[tid] = f"blocked by {stuck}, which can never start ({problems[stuck]})"
                changed = True
    return {tid: why for tid, why in problems.items() if tasks[tid].status is Status.PENDING}


def _live_edges(task: Task, tasks: Mapping[str, Task]) -> list[str]:
    """Blockers that still hold this task back (a blocker in review/merged is done)."""
    return [b for b in task.blocked_by
            if b in tasks and not tasks[b].status.satisfies_blockers]


_has_blockers = attrgetter("blocked_by")


def _cycle_members(roots: Mapping[str, Task], tasks: Mapping[str, Task]) -> set[str]:
    """Tasks on a dependency cycle among unfinished tasks (iterative Tarjan SCC), searched
    from ``roots`` (every task with blockers: a cycle passes only through such tasks)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    members: set[str] = set()
    counter = 0
    for root, task in roots.items():
        # Only an unfinished task that still waits on someone can be on a cycle.
        if root in index or task.status.final or not _live_edges(task, tasks):
            continue
        work = [(root, iter(_live_edges(tasks[root], tasks)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(_live_edges(tasks[nxt], tasks))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                scc = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    scc.append(w)
                    if w == node:
                        break
                if len(scc) > 1 or node in _live_edges(tasks[node], tasks):
                    members.update(scc)
    return members


def _cycle_path(start: str, tasks: Mapping[str, Task]) -> list[str]:
    """A readable cycle through ``start``: start -> ... -> start (breadth-first, shortest)."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for node in frontier:
            for b in _live_edges(tasks[node], tasks):
                if b == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if b not in parents:
                    parents[b] = node
                    nxt.append(b)
        frontier = nxt
    return [start]
