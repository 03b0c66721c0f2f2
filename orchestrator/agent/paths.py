"""Confinement of file tools to the task's worktree, and the glob syntax they share.

Every path a tool receives is resolved against the worktree with symlinks
followed; a result outside the worktree (``../``, an absolute path elsewhere, a
symlink pointing out) is refused with `PathEscape`, whatever the permission mode.
The same glob syntax serves permission rules (``Edit(src/**)``), the ``glob``
tool and ``grep``'s file filter: ``**`` crosses folders, ``*`` and ``?`` stay
inside one, ``[abc]`` and ``{a,b}`` as in a shell.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path

from orchestrator.errors import InvalidInput


class PathEscape(InvalidInput):
    """A path resolves outside the folders a tool may touch."""


def confine(root: Path, path: str, *, extra_roots: Iterable[Path] = ()) -> Path:
    """``path`` resolved against ``root`` (symlinks followed); `PathEscape` when outside.

    ``extra_roots`` are further folders the path may lie in (e.g. the spill folder
    for read-only tools).
    """
    if not path or "\0" in path:
        raise PathEscape(f"not a usable path: {path!r}")
    base = root.resolve()
    target = (base / path).resolve()
    for allowed in (base, *(r.resolve() for r in extra_roots)):
        if target.is_relative_to(allowed):
            return target
    raise PathEscape(f"path {path!r} resolves to {target}, outside the worktree {base}")


def shown(path: Path, root: Path) -> str:
    """How a path is shown to the model: relative to the worktree when inside it."""
    base = root.resolve()
    return str(path.relative_to(base)) if path.is_relative_to(base) else str(path)


@functools.lru_cache(maxsize=512)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """A compiled regex that fully matches the '/'-separated paths ``pattern`` names."""
    return re.compile(_glob(pattern) + r"\Z", re.DOTALL)


def _glob(p: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(p):
        c = p[i]
        if p.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if p.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := p.find("]", i + 2)) != -1:
            body = p[i + 1 : end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end
        elif c == "{" and (end := p.find("}", i)) != -1:
            out.append("(?:" + "|".join(_glob(alt) for alt in p[i + 1 : end].split(",")) + ")")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def glob_match(pattern: str, rel: str) -> bool:
    """Whether the relative path ``rel`` matches ``pattern``; a pattern without '/'
    matches the last component at any depth (as in ``.gitignore`` and ripgrep)."""
    if "/" not in pattern:
        rel = rel.rsplit("/", 1)[-1]
    return glob_regex(pattern).match(rel) is not None
