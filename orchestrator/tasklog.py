"""Compatibility names: task transcripts are part of the control plane now (see
`orchestrator.controlplane.TaskLogs`, reached through ``board.logs``)."""

from orchestrator.board.tasklogs import MAX_FIELD_CHARS, TaskLog, read_jsonl

__all__ = ["MAX_FIELD_CHARS", "TaskLog", "read_jsonl"]
