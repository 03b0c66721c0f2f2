"""Adding a task: the one path of every face (``orchestrator add``, the web board's
form, the MCP server, the planner, an agent's ``task_create``, forge issues, the demo).

One function, so every face checks the same things: the repository has a commit,
the backend and the agent profile exist, the blockers are real tasks, the labels
are short names (and the board's own checks on every field). Labels live in the
task's ``metadata["labels"]`` (a list of names), the same place a dropped task
file's extra fields go. A module below the agent layer: it imports no backend.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from orchestrator.backend_names import check_backend
from orchestrator.errors import InvalidInput
from orchestrator.layout import Layout
from orchestrator.model import Budget, ForgeLink, Task

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
    return label_names(task.metadata.get("labels"))


def label_names(raw: object) -> list[str]:
    """The strings in ``raw`` (a list) that are labels; the rest are left out."""
    if not isinstance(raw, list | tuple):
        return []
    return [x for x in raw if isinstance(x, str) and LABEL_RE.match(x)]


def add_task(layout: Layout, config: Config | None, board: Board, subject: str, *,
             description: str = "", blocked_by: Collection[str] = (), priority: int = 0,
             backend: str | None = None, agent: str | None = None, plan_first: bool = False,
             labels: Collection[str] = (), expect_changes: bool = True,
             budget: Budget | None = None, metadata: dict[str, Any] | None = None,
             forge: ForgeLink | None = None, actor: str = "cli") -> Task:
    """Add a pending task; errors are `UserError`s with one clear line. ``config`` is
    needed only with ``agent`` (profiles may be defined there); None loads it then.
    ``metadata`` is the face's own (the labels join it)."""
    from orchestrator.repo import require_commit

    require_commit(layout.root)
    if backend is not None:
        check_backend(backend)
    if agent is not None:
        from orchestrator.profiles import check_task_profile

        if config is None:
            from orchestrator.config import Config

            config = Config.load(layout.root)
        check_task_profile(layout.root, config, agent)
    extra: dict[str, Any] = {k: v for k, v in (("backend", backend), ("agent", agent),
                                               ("forge", forge)) if v is not None}
    if plan_first:
        extra["plan_first"] = True
    if not expect_changes:
        extra["expect_changes"] = False
    if budget is not None and budget != Budget():
        extra["budget"] = budget
    meta = dict(metadata or {})
    names = check_labels(labels)
    if names:
        meta["labels"] = names
    if meta:
        extra["metadata"] = meta
    return board.add(subject, description=description, blocked_by=list(blocked_by),
                     priority=priority, actor=actor, **extra)
