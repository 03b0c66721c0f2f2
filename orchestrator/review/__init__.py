"""Review: see, compare, merge, discard and retry the branches the team keeps.

    review_rows(layout, config)                       the review table (``review --json``)
    diff_text(layout, config, task_id, stat=False)    the task's changes against its base
    merge_task(layout, config, task_id, strategy="merge"|"squash"|"rebase", into=None)
    discard_task(layout, config, task_id, force=False)
    retry_task(layout, config, task_id, feedback=None)

Every function takes ``actor=`` (who the events name) and an optional open
``board=``. ``merge``, ``discard``, ``retry`` and ``review`` are the same functions
under the names the MCP server looks up.
"""

from orchestrator.review.diff import diff_text
from orchestrator.review.discarding import DiscardResult, discard_task
from orchestrator.review.merging import STRATEGIES, MergeResult, merge_task
from orchestrator.review.retrying import retry_task
from orchestrator.review.rows import review_rows

merge = merge_task
discard = discard_task
retry = retry_task
review = review_rows

__all__ = [
    "STRATEGIES", "DiscardResult", "MergeResult", "diff_text", "discard", "discard_task",
    "merge", "merge_task", "retry", "retry_task", "review", "review_rows",
]
