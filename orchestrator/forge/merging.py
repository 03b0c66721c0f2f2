"""``orchestrator merge``/``land`` on a board with a forge: the pull request is merged
through the forge's API, so branch protection and required checks decide (the forge's
answer is the refusal), and the task is then merged here as when someone merged it there
(`orchestrator.forge.sync.mark_merged`). The base branch is never pushed by us."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.errors import Conflict
from orchestrator.forge import ForgeError, open_forge
from orchestrator.git import Git
from orchestrator.layout import Layout
from orchestrator.model import Status
from orchestrator.review.common import using_board

if TYPE_CHECKING:
    from orchestrator.review.landing import LandReport, Outcome
    from orchestrator.review.merging import MergeResult

FORGE_CHECKS = "the forge's required checks"


def merge_on_forge(layout: Layout, config: Config, task_id: str, strategy: str, *,
                   actor: str, board: ControlPlane | None = None) -> MergeResult:
    """Merge a task's pull request through the forge; the `MergeResult` of the task merged
    here. A refusal (checks not passed, review required, a moved head) is a `Conflict` with
    the forge's reason, and nothing changes."""
    from orchestrator.forge.sync import mark_merged

    forge = open_forge(config.forge, layout.root)
    assert forge is not None
    method = config.forge.merge_method if strategy == "merge" else strategy
    try:
        with using_board(layout, config, board, actor) as b:
            task = b.get(task_id)
            link = task.forge
            if task.status is not Status.REVIEW:
                raise Conflict(f"{task.id} is {task.status}: only a task in review can be "
                               "merged")
            if link is None or link.pr is None or link.pushed is None:
                raise Conflict(f"{task.id} has no pull request yet: the lead opens one (or "
                               "run `orchestrator forge sync`)")
            pull = forge.get_pull(link.pr)
            if not pull.merged:
                if pull.head_sha != link.pushed:
                    raise Conflict(f"pull request #{pull.number} is at {pull.head_sha[:12]}, "
                                   f"not {link.pushed[:12]} that orchestrator pushed; "
                                   "`orchestrator forge sync` first")
                try:
                    forge.merge_pull(pull.number, sha=link.pushed, method=method)
                except ForgeError as exc:
                    raise Conflict(f"the forge refused to merge #{pull.number}: {exc}") from None
                pull = forge.get_pull(pull.number)
            return mark_merged(layout, config, b, task, pull, actor=actor)
    finally:
        forge.close()


def land_on_forge(layout: Layout, config: Config, ids: Sequence[str] | None, *, strategy: str,
                  actor: str, board: ControlPlane | None,
                  progress: Callable[[Outcome], None] | None,
                  named: Collection[str] = ()) -> LandReport:
    """``land`` on a forge board: each task's pull request merged through the forge in land
    order (blockers first); one the forge refuses stays in review with the reason, and the
    tasks stacked on it are skipped. One that changes control files and that no person
    named (``named``) is skipped (`orchestrator.review.control`)."""
    from orchestrator.review.control import describe_control, task_control_changes
    from orchestrator.review.landing import LandReport, Outcome, _selected, land_order

    started = time.monotonic()
    report = LandReport(verify=FORGE_CHECKS)
    with using_board(layout, config, board, actor) as b:
        tasks = land_order(_selected(b, ids))
        failed: set[str] = set()
        for task in tasks:
            blocker = next((x for x in task.blocked_by if x in failed), None)
            control = [] if blocker is not None or task.id in named else \
                task_control_changes(Git(layout.root), task)
            if blocker is not None:
                out = Outcome(task=task.id, result="skipped", reason=f"{blocker} did not land")
                failed.add(task.id)
            elif control:
                out = Outcome(task=task.id, result="skipped",
                              reason=describe_control(control, task.id))
                failed.add(task.id)
            else:
                try:
                    result = merge_on_forge(layout, config, task.id, strategy, actor=actor,
                                            board=b)
                    out = Outcome(task=task.id, result="landed",
                                  commit=result.commit)
                except Conflict as exc:
                    out = Outcome(task=task.id, result="rejected", reason=str(exc))
                    failed.add(task.id)
            report.outcomes.append(out)
            if progress is not None:
                progress(out)
    report.seconds = round(time.monotonic() - started, 3)
    return report
