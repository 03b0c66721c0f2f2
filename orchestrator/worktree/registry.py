"""What the orchestrator itself created for each task: the only thing removal trusts.

A task file is data anyone can edit (a person, a script, an agent); its ``branch``,
``base`` and ``worktree`` fields are never a reason to delete anything. Instead,
when `WorktreeManager` creates a branch and worktree for a task it writes a record,
``<git-common-dir>/orchestrator/registry/<task_id>.json``, and removal, discard, gc
and merge act only on the branch that record names.

Why a file under the git common dir (and not refs, or ``.tasks/``):

- no agent can write it: it is outside every worktree, and the bash sandbox binds
  this folder read-only (`orchestrator.sandbox`) although the rest of the git
  dir is writable for commits; ``.tasks/`` is the board, edited by people and tools;
- it belongs to this clone, as worktrees do (a shared PostgreSQL board has no
  business recording which folders one machine made);
- it costs one small file write per created worktree and one read per removal, no
  git process (a ref holding a blob would cost two git processes per write).

Boards made before the registry have no records. A task's branch is then adopted
(a record written with ``adopted: true``) only when it is in the task's own namespace
(``<prefix><task_id>-…`` or ``<prefix><task_id>``) and, when the task's worktree
folder is there, git's own metadata for that worktree has it checked out on that
branch. Anything else is refused with the reason and left for a person to delete.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from orchestrator.fsutil import atomic_write
from orchestrator.worktree.names import check_branch, check_component

MAX_RECORD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Record:
    """One task's branch and worktree, as the orchestrator made (or adopted) them."""

    task: str
    branch: str
    path: str
    """The worktree folder (absolute)."""
    prefix: str
    """The branch prefix in force when the branch was made."""
    adopted: bool = False
    """Written for a board made before the registry (see the module docstring)."""


def in_namespace(branch: str, prefix: str, task_id: str) -> bool:
    """Whether ``branch`` is one the orchestrator would make for ``task_id``:
    ``<prefix><task_id>-<slug>`` or ``<prefix><task_id>``."""
    stem = f"{prefix}{task_id}"
    return branch == stem or branch.startswith(stem + "-")


class Registry:
    """The records of one repository (one JSON file per task)."""

    def __init__(self, common_dir: Path) -> None:
        self.root = registry_root(common_dir)

    def _file(self, task_id: str) -> Path:
        return self.root / f"{check_component(task_id, 'task id')}.json"

    def get(self, task_id: str) -> Record | None:
        """The task's record; None when there is none or it is not one we wrote."""
        path = self._file(task_id)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            data = json.loads(os.read(fd, MAX_RECORD_BYTES))
            rec = Record(task=str(data["task"]), branch=check_branch(str(data["branch"])),
                         path=str(data["path"]), prefix=str(data.get("prefix", "")),
                         adopted=bool(data.get("adopted", False)))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        finally:
            os.close(fd)
        return rec if rec.task == task_id else None

    def put(self, record: Record) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        atomic_write(self._file(record.task), json.dumps(asdict(record), indent=1) + "\n",
                     durable=False)

    def forget(self, task_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._file(task_id).unlink()


def registry_root(common_dir: Path) -> Path:
    return common_dir / "orchestrator" / "registry"
