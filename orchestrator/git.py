"""The one runner for the git command line: every git command orchestrator runs on
the host (in the main checkout, in a task's worktree, on its branch) goes through `Git`.

Plain ``subprocess.run`` per call: no long-lived ``git cat-file`` helpers to leak,
and safe to use from many threads. Failures become `GitError` with git's stderr.

Host git never runs what an agent wrote (the trust boundary in docs/architecture.md):

- `PINNED` settings come from the environment (``GIT_CONFIG_COUNT``), which wins over
  every config file and reaches the git processes git itself starts: no hook runs
  (``core.hooksPath`` is a file, so no hook is found under it: ``pre-commit``,
  ``post-commit``, ``post-checkout``, ``post-merge``, ``reference-transaction``…, also a
  relative ``.husky/_`` that the person's config names and that would resolve into the
  worktree), no ``core.fsmonitor`` program, and no git process inside a nested repository
  (an agent's ``sub/.git`` with its own config) — its commit is compared, its files are not;
- the only config file of a task's worktree the agent can write is its admin folder's
  ``config.worktree`` (read by git when ``extensions.worktreeConfig`` is on, as sparse
  checkouts turn it): a command in a worktree whose ``config.worktree`` sets anything but
  sparse-checkout settings is refused (`check_worktree_config`), so filter, diff and merge
  drivers, ``core.sshCommand``, ``gpg.program``, ``include.path`` and the like come only
  from the person's config files. A ``.gitattributes`` the agent commits can name only
  drivers the person defined.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.beneath import read_text_beneath
from orchestrator.errors import GitError, UserError

#: Variables that would point git at another repository or index than the one we name.
_REPO_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_PREFIX", "GIT_COMMON_DIR",
              "GIT_OBJECT_DIRECTORY", "GIT_NAMESPACE")

_MODEL_KEYS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")

PINNED: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", os.devnull),
    ("core.fsmonitor", "false"),
    ("diff.ignoreSubmodules", "dirty"),
    ("submodule.recurse", "false"),
)
"""Settings no config file can change for a git command orchestrator runs."""

WORKTREE_CONFIG_KEYS = frozenset({("core", "sparsecheckout"), ("core", "sparsecheckoutcone"),
                                  ("index", "sparse")})
"""What a task worktree's ``config.worktree`` may set (what ``git sparse-checkout`` writes)."""
CUT = "\\ [cut here: the output is over {limit} bytes]\n"
"""The last line of a `Git.run` output stopped at its limit (a diff's ``\\`` note line)."""
MAX_GIT_FILE = 1 << 12
MAX_WORKTREE_CONFIG = 1 << 16
_SECTION = re.compile(r"\[\s*([A-Za-z0-9.-]+)\s*\]")
_ENTRY = re.compile(r"([A-Za-z][A-Za-z0-9-]*)\s*=\s*(true|false|yes|no|on|off|1|0)", re.I)


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    # no model key in a git process (git needs none; what it needs for a push — an SSH
    # agent, a credential helper's token — is left alone)
    env = {k: v for k, v in os.environ.items()
           if k not in _REPO_VARS and k not in _MODEL_KEYS}
    env["LC_ALL"] = "C"  # stable messages, and the `locked` reason "initializing" we look for
    env.update(extra or {})
    try:  # after any the person set, so that ours are the last word
        n = int(env.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        n = 0
    for i, (key, value) in enumerate(PINNED, n):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    env["GIT_CONFIG_COUNT"] = str(n + len(PINNED))
    return env


def worktree_git_dir(path: Path) -> Path | None:
    """The admin folder (``<common>/worktrees/<name>``) that the ``.git`` file of the
    linked worktree at ``path`` names, when it names one that names it back; None when
    ``path`` is no linked worktree. Read without following links or waiting on a FIFO."""
    try:
        text = read_text_beneath(path, ".git", MAX_GIT_FILE).strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("gitdir:"):
        return None
    git_dir = Path(text.removeprefix("gitdir:").strip())
    git_dir = git_dir if git_dir.is_absolute() else (path / git_dir).resolve()
    try:
        back = Path(read_text_beneath(git_dir, "gitdir", MAX_GIT_FILE).strip())
    except (OSError, UnicodeDecodeError):
        return None
    if back.resolve() != (path / ".git").resolve():
        return None
    return git_dir


def check_worktree_config(path: Path) -> None:
    """`GitError` when the linked worktree at ``path`` has a ``config.worktree`` that sets
    anything but `WORKTREE_CONFIG_KEYS` (or is not a small regular file): its admin folder
    is writable from the task's sandbox, so such a setting may be the agent's."""
    admin = worktree_git_dir(path)
    if admin is None:
        return
    try:
        text = read_text_beneath(admin, "config.worktree", MAX_WORKTREE_CONFIG)
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError) as exc:
        raise GitError(f"{admin / 'config.worktree'}: {exc}; not running git there") from None
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if m := _SECTION.fullmatch(line):
            section = m[1].lower()
            continue
        m = _ENTRY.fullmatch(line)
        if m is None or (section, m[1].lower()) not in WORKTREE_CONFIG_KEYS:
            raise GitError(
                f"{admin / 'config.worktree'} sets {line[:80]!r}, and a task's worktree "
                "config holds only sparse-checkout settings (an agent may have written "
                "it): not running git there; remove the line to go on")


@dataclass(frozen=True)
class Git:
    """Runs git in ``cwd`` (a repository or one of its worktrees)."""

    cwd: Path

    def run(self, *args: str, check: bool = True, env: Mapping[str, str] | None = None,
            input: str | None = None, timeout: float | None = None,
            errors: str = "strict", limit: int | None = None
            ) -> subprocess.CompletedProcess[str]:
        """``git ARGS`` in ``cwd`` under the rules above; `GitError` when it fails (and
        ``check``) or when ``cwd``'s worktree config is not one git may run under.
        ``limit``: read at most that many bytes of output, then stop git; the output then
        ends with a `CUT` line (a 100 MB diff costs ``limit`` of memory, not 100 MB)."""
        check_worktree_config(Path(self.cwd))
        if limit is not None:
            return self._capped(args, env, limit, check)
        try:
            out = subprocess.run(
                ["git", *args], cwd=self.cwd, env=git_env(env), input=input,
                capture_output=True, text=True, errors=errors, check=False, timeout=timeout,
            )
        except FileNotFoundError as exc:
            if not Path(self.cwd).is_dir():
                raise GitError(f"no such folder: {self.cwd}") from exc
            raise UserError("git is not installed or not on PATH") from exc
        except NotADirectoryError as exc:
            raise GitError(f"not a folder: {self.cwd}") from exc
        except subprocess.TimeoutExpired as exc:
            raise GitError(f"git {' '.join(args[:2])}: no answer in {timeout} s") from exc
        if check and out.returncode != 0:
            msg = out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}"
            raise GitError(f"git {' '.join(args[:2])}: {msg}")
        return out

    def _capped(self, args: tuple[str, ...], env: Mapping[str, str] | None, limit: int,
                check: bool) -> subprocess.CompletedProcess[str]:
        with subprocess.Popen(["git", *args], cwd=self.cwd, env=git_env(env),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            data = proc.stdout.read(limit + 1)
            cut = len(data) > limit
            if cut:
                proc.kill()
            err = proc.stderr.read(1 << 16)
            code = 0 if cut else proc.wait()
        text = data[:limit].decode("utf-8", "replace")
        if cut:
            text += ("" if text.endswith("\n") else "\n") + CUT.format(limit=limit)
        out = subprocess.CompletedProcess(["git", *args], code, text,
                                          err.decode("utf-8", "replace"))
        if check and code != 0:
            raise GitError(f"git {' '.join(args[:2])}: {out.stderr.strip() or f'exit {code}'}")
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

