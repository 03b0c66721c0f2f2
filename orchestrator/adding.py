"""Adding a task as a person does it (``orchestrator add``, the web board's form).

One function, so every face checks the same things: the agent profile exists
(when profiles are defined), the blockers are real tasks, the labels are short
names. Labels live in the task's ``metadata["labels"]`` (a list of names), the
same place a dropped task file's extra fields go.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from orchestrator.errors import InvalidInput
from orchestrator.layout import Layout
from orchestrator.model import Budget, Task

if TYPE_CHECKING:
    from orchestrator.config import Config
    from orchestrator.protocols import Board

LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,39}$")
MAX_LABELS = 20


def check_labels(labels: Collection[str]) -> list[str]:
    """The labels, stripped and de-duplicated in order; `InvalidInput` for a bad one."""
    out: list[str] = []
    for raw in labels:
        label = raw.strip()
        if not LABEL_RE.match(label):
            raise InvalidInput(f"not a label: {raw!r} (letters, digits and ._:- up to 40)")
        if label not in out:
            out.append(label)
    if len(out) > MAX_LABELS:
        raise InvalidInput(f"at most {MAX_LABELS} labels")
    return out


def labels_of(task: Task) -> list[str]:
    """A task's labels (``metadata.labels``); anything malformed there counts as none."""
    raw = task.metadata.get("labels")
    if not isinstance(raw, list):
        return []
    return [x for x in raw if isinstance(x, str) and LABEL_RE.match(x)]


def add_task(layout: Layout, config: Config | None, board: Board, subject: str, *,
             description: str = "", blocked_by: Collection[str] = (), priority: int = 0,
             backend: str | None = None, agent: str | None = None, plan_first: bool = False,
             labels: Collection[str] = (), expect_changes: bool = True,
             budget: Budget | None = None, actor: str = "cli") -> Task:
    """Add a pending task; errors are `UserError`s with one clear line. ``config`` is
    needed only with ``agent`` (profiles may be defined there); None loads it then."""
    from orchestrator.backends import check_backend
    from orchestrator.repo import require_commit

    require_commit(layout.root)
    if backend is not None:
        check_backend(backend)
    if agent is not None:
        from orchestrator.agent.profiles import check_task_profile

        if config is None:
            from orchestrator.config import Config

            config = Config.load(layout.root)
        check_task_profile(layout.root, config, agent)
    extra: dict[str, Any] = {k: v for k, v in (("backend", backend), ("agent", agent))
                             if v is not None}
    if plan_first:
        extra["plan_first"] = True
    if not expect_changes:
        extra["expect_changes"] = False
    if budget is not None and budget != Budget():
        extra["budget"] = budget
    names = check_labels(labels)
    if names:
        extra["metadata"] = {"labels": names}
    return board.add(subject, description=description, blocked_by=list(blocked_by),
                     priority=priority, actor=actor, **extra)
