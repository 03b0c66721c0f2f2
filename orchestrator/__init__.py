"""orchestrator: a daemon that runs a team of coding agents on one git repository.

The control plane (`.tasks/`) is the single source of truth; every claim works in
its own git worktree (`.worktrees/<task_id>`); everything is appended to
`.worktrees/events.jsonl`. See README.md for the tour.
"""

__version__ = "0.1.0"
