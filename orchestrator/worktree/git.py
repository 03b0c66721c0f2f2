"""A thin runner for the git command line.

Plain ``subprocess.run`` per call: no long-lived ``git cat-file`` helpers to leak,
and safe to use from many threads. Failures become `GitError` with git's stderr.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import GitError, UserError

#: Variables that would point git at another repository or index than the one we name.
_REPO_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_PREFIX", "GIT_COMMON_DIR",
              "GIT_OBJECT_DIRECTORY", "GIT_NAMESPACE")


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _REPO_VARS}
    env["LC_ALL"] = "C"  # stable messages, and the `locked` reason "initializing" we look for
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class Git:
    """Runs git in ``cwd`` (a repository or one of its worktrees)."""

    cwd: Path

    def run(self, *args: str, check: bool = True, env: Mapping[str, str] | None = None,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        try:
            out = subprocess.run(
                ["git", *args], cwd=self.cwd, env=git_env(env), input=input,
                capture_output=True, text=True, check=False,
            )
        except FileNotFoundError as exc:
            if not Path(self.cwd).is_dir():
                raise GitError(f"no such folder: {self.cwd}") from exc
            raise UserError("git is not installed or not on PATH") from exc
        except NotADirectoryError as exc:
            raise GitError(f"not a folder: {self.cwd}") from exc
        if check and out.returncode != 0:
            msg = out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}"
            raise GitError(f"git {' '.join(args[:2])}: {msg}")
        return out

    def out(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        return self.run(*args, env=env).stdout.strip()

    def ok(self, *args: str) -> bool:
        return self.run(*args, check=False).returncode == 0

    def commit_of(self, rev: str) -> str | None:
        """The commit ``rev`` names, or None when it names none."""
        return self.commits(rev)[0]

    def commits(self, *revs: str) -> list[str | None]:
        """The commit each rev names (None where it names none), in one git call."""
        if not revs:
            return []
        wanted = [r if r and "\n" not in r else "\0" for r in revs]
        out = self.run("cat-file", "--batch-check=%(objectname) %(objecttype)",
                       input="".join(f"{r}^{{commit}}\n" for r in wanted))
        found: list[str | None] = []
        for line in out.stdout.splitlines():
            oid, _, kind = line.partition(" ")
            found.append(oid if kind == "commit" else None)
        return found

    def branch_exists(self, branch: str) -> bool:
        return self.ok("show-ref", "--verify", "--quiet", f"refs/heads/{branch}")


@dataclass
class WorktreeEntry:
    """One block of ``git worktree list --porcelain``."""

    path: Path
    head: str | None = None
    branch: str | None = None
    """Short branch name (``task/001-x``), None when detached or bare."""
    locked: str | None = None
    prunable: str | None = None


def list_worktrees(git: Git) -> list[WorktreeEntry]:
    entries: list[WorktreeEntry] = []
    for block in git.run("worktree", "list", "--porcelain").stdout.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, _, value = line.partition(" ")
            fields[key] = value
        if "worktree" not in fields:
            continue
        branch = fields.get("branch")
        entries.append(WorktreeEntry(
            path=Path(fields["worktree"]),
            head=fields.get("HEAD"),
            branch=branch.removeprefix("refs/heads/") if branch else None,
            locked=fields.get("locked"),
            prunable=fields.get("prunable"),
        ))
    return entries



_HEX = frozenset("0123456789abcdef")


def is_oid(text: str) -> bool:
    """Whether ``text`` is a full (SHA-1) object id."""
    return len(text) == 40 and set(text) <= _HEX


def read_commits(git_dir: Path, common_dir: Path, revs: Sequence[str]
                 ) -> list[str | None] | None:
    """What `Git.commits` answers for ``revs``, read from the ref files (loose refs and
    ``packed-refs``) instead of running git; None when a rev needs git to tell: a reftable
    repository, a symbolic, tag or ambiguous ref, an object id not also named by a ref here.

    For names only: ``HEAD`` (of ``git_dir``), ``refs/heads/…`` and ``refs/remotes/…``, a
    short branch name that no tag,
    ``refs/<name>`` or ``$GIT_DIR/<name>`` shadows, and full commit ids that one of the
    other revs resolved to.
    """
    if (common_dir / "reftable").exists():
        return None
    packed: dict[str, str] | None = None

    def ref(name: str) -> str | None:
        nonlocal packed
        try:
            text = (common_dir / name).read_text().strip()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            if packed is None:
                packed = _packed_refs(common_dir)
            return packed.get(name)
        return text if is_oid(text) else "?"

    found: list[str | None] = []
    literals: list[int] = []
    for rev in revs:
        if not rev or "\n" in rev:
            found.append(None)
            continue
        if is_oid(rev):
            literals.append(len(found))
            found.append(rev)
            continue
        if rev == "HEAD":
            try:
                head = (git_dir / "HEAD").read_text().strip()
            except OSError:
                return None
            oid = ref(head[5:]) if head.startswith("ref: refs/") else "?"
        elif rev.startswith(("refs/heads/", "refs/remotes/")) and ".." not in rev:
            oid = ref(rev)  # branches name commits; a tag may name a tag object
        elif ".." in rev or rev.startswith(("/", "-")) or any(c in rev for c in "^~:@{*?[ \\"):
            return None
        else:
            if (common_dir / rev).exists() or (git_dir / rev).exists() or any(
                    ref(f"refs/{p}{rev}") is not None for p in ("", "tags/")):
                return None  # shadowed: git's own rules decide
            oid = ref(f"refs/heads/{rev}")
            if oid is None:
                return None  # maybe a remote branch, an abbreviated id…: ask git
        if oid == "?" or (oid is not None and (oid.startswith("^") or len(oid) != 40)):
            return None
        found.append(oid)
    named = {oid for i, oid in enumerate(found) if i not in literals and oid}
    if any(found[i] not in named for i in literals):
        return None
    return found


def _packed_refs(common_dir: Path) -> dict[str, str]:
    """``packed-refs`` as name -> object id; a ref with a peeled line (an annotated tag)
    maps to ``"?"``, since its own id is not a commit's."""
    refs: dict[str, str] = {}
    try:
        lines = (common_dir / "packed-refs").read_text().splitlines()
    except FileNotFoundError:
        return refs
    last = ""
    for line in lines:
        if line.startswith("^") and last:
            refs[last] = "?"
        elif line and not line.startswith("#"):
            oid, _, name = line.partition(" ")
            refs[name] = oid
            last = name
    return refs
