"""Control files: what configures orchestrator, its agents, git or CI — the person's.

orchestrator reads its settings, permission rules, MCP servers and agent profiles from
the main checkout only, never from a task's worktree. A task branch that *changes* one
of these files would change them for every later task once merged, so such a branch is
marked on ``review``, on the web board and in ``land``, and is landed only when a person
names it (``orchestrator land 3``): ``land --all-reviewed`` and the lead's ``up --land``
skip it. So a running lead's live settings reload never applies a change the lead
merged itself: only one a person landed (or made) in the main checkout.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from pathlib import PurePosixPath

from orchestrator.errors import Conflict, GitError
from orchestrator.git import Git
from orchestrator.model import Task

ROOT_FILES = frozenset({
    "orchestrator.toml", ".mcp.json", ".worktreeinclude", ".gitmodules", ".envrc",
    ".devcontainer.json", ".gitlab-ci.yml", ".travis.yml", "azure-pipelines.yml",
    "Jenkinsfile", "bitbucket-pipelines.yml", ".pre-commit-config.yaml", "lefthook.yml",
    ".lefthook.yml",
})
"""Files at the top of the tree: orchestrator's and MCP settings, which files a worktree
gets, submodules, direnv, CI and hook managers."""
ROOT_FOLDERS = frozenset({
    ".claude", ".claude-plugin", ".husky", ".githooks", ".git-hooks", ".github", ".gitea",
    ".forgejo", ".circleci", ".buildkite", ".devcontainer",
})
"""Folders at the top of the tree: Claude Code settings and agents, git hooks, CI."""
ANYWHERE = frozenset({".gitattributes"})
"""Names that count in any folder (attributes name filter, diff and merge drivers)."""
PYPROJECT = "pyproject.toml"


def is_control_file(path: str) -> bool:
    """Whether ``path`` (relative to the repository's top, ``/``-separated) is a control
    file; ``pyproject.toml`` is one only through its ``[tool.orchestrator]`` table."""
    parts = PurePosixPath(path).parts
    if not parts:
        return False
    return (path in ROOT_FILES or (parts[0] in ROOT_FOLDERS and len(parts) > 1)
            or parts[-1] in ANYWHERE)


def control_changes(repo: Git, base: str, tip: str,
                    paths: Iterable[str] | None = None) -> list[str]:
    """The control files that ``base..tip`` changes (``paths``: the changed paths when the
    caller has them, else asked of git)."""
    if paths is None:
        out = repo.run("diff", "--name-only", "-z", "--no-renames", base, tip).stdout
        paths = [p for p in out.split("\0") if p]
    paths = list(paths)
    found = [p for p in paths if is_control_file(p)]
    if PYPROJECT in paths and _tool_table(repo, base) != _tool_table(repo, tip):
        found.append(f"{PYPROJECT} [tool.orchestrator]")
    return found


def task_control_changes(repo: Git, task: Task) -> list[str]:
    """The control files ``task``'s branch changes; when git cannot tell, a one-item list
    saying so (fail closed: such a task waits for a person too)."""
    from orchestrator.branches.changes import changes

    try:
        ch = changes(repo, task)
        return control_changes(repo, ch.base, ch.tip)
    except (Conflict, GitError) as exc:
        return [f"(cannot tell: {exc})"]


def describe_control(files: list[str], task_id: str) -> str:
    """One line for review, the web board and land."""
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    return (f"changes control files ({shown}): it lands only when a person names it "
            f"(orchestrator land {task_id})")


def _tool_table(repo: Git, rev: str) -> object:
    """``[tool.orchestrator]`` of ``pyproject.toml`` at ``rev`` (its text when it does not
    parse, so any edit of a broken file counts)."""
    out = repo.run("show", f"{rev}:{PYPROJECT}", check=False)
    if out.returncode != 0:
        return None
    try:
        return tomllib.loads(out.stdout).get("tool", {}).get("orchestrator")
    except tomllib.TOMLDecodeError:
        return out.stdout
