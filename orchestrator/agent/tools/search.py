"""Search tools: glob, grep, ls. Read-only; confined to the worktree.

``glob`` and ``grep`` look at the files git does not ignore (tracked and
untracked), as ripgrep does, so ``node_modules`` and build output stay out of
the way; outside a git work tree they walk the folder, skipping ``.git``.
Files that a ``Read`` deny rule covers are skipped too.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.agent.paths import PathEscape, glob_match, glob_regex, shown
from orchestrator.agent.tools.common import PathTool, decode, is_binary, obj, prop
from orchestrator.errors import GitError, UserError
from orchestrator.git import Git

MAX_GLOB_RESULTS = 500
DEFAULT_GREP_LIMIT = 200
MAX_GREP_FILE_BYTES = 5_000_000
MAX_LS_ENTRIES = 500
_DIR = prop("string", "Folder to search, relative to the working directory (default: the "
            "working directory).")


def list_files(folder: Path, ctx: ToolContext) -> list[Path]:
    """Files under ``folder`` that git does not ignore, minus those a Read deny rule covers."""
    try:
        out = Git(folder).run("ls-files", "-z", "--cached", "--others", "--exclude-standard",
                              env={**ctx.env, "GIT_OPTIONAL_LOCKS": "0"},
                              errors="surrogateescape").stdout
        paths = [folder / p for p in dict.fromkeys(p for p in out.split("\0") if p)]
    except (OSError, GitError, UserError):
        paths = []
        for top, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if d != ".git")
            paths += [Path(top) / f for f in sorted(files)]
    gate = ctx.gate
    base = ctx.cwd.resolve()
    kept = []
    for p in paths:
        real = p.resolve()
        if not p.is_file() or not real.is_relative_to(base):
            continue  # deleted, a submodule, or a symlink pointing out of the worktree
        if gate is not None and gate.denies_read(real):
            continue
        kept.append(p)
    return kept


class GlobTool(PathTool):
    name = "glob"
    path_arg = "path"
    description = (
        "Find files by name pattern, e.g. `**/*.py` or `src/**/*.{ts,tsx}` (`**` crosses "
        "folders, `*` does not). Newest first (by modification time). Ignored files are "
        f"skipped; at most {MAX_GLOB_RESULTS} results."
    )
    input_schema = obj(
        ["pattern"],
        pattern=prop("string", "Glob pattern, relative to path."),
        path=_DIR,
    )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        pattern = args["pattern"].removeprefix("./")
        if pattern.startswith("/") or ".." in pattern.split("/"):
            return self.error("pattern must be relative to path, without '..'")
        try:
            folder = self.resolve(args, ctx)
        except PathEscape as exc:
            return self.error(str(exc))
        if not folder.is_dir():
            return self.error(f"not a folder: {args.get('path')}")
        regex = glob_regex(pattern)
        hits = [p for p in list_files(folder, ctx)
                if regex.match(p.relative_to(folder).as_posix())]
        if not hits:
            return ToolResult(f"no files match {pattern}")
        hits.sort(key=lambda p: (-p.stat().st_mtime, str(p)))
        lines = [shown(p.absolute(), ctx.cwd) for p in hits[:MAX_GLOB_RESULTS]]
        if len(hits) > MAX_GLOB_RESULTS:
            lines.append(f"({len(hits) - MAX_GLOB_RESULTS} more not shown; narrow the pattern)")
        return ToolResult("\n".join(lines))


class GrepTool(PathTool):
    name = "grep"
    path_arg = "path"
    description = (
        "Search file contents with a Python regular expression. Output modes: "
        "files_with_matches (default; paths, sorted), content (path:line:text), count "
        "(path:N). Ignored and binary files are skipped."
    )
    input_schema = obj(
        ["pattern"],
        pattern=prop("string", "Regular expression (Python `re` syntax)."),
        path=prop("string", "File or folder to search (default: the working directory)."),
        glob=prop("string", "Only files matching this glob, e.g. `*.py` or `src/**/*.ts`."),
        output_mode=prop("string", "What to return (default files_with_matches).",
                         enum=["files_with_matches", "content", "count"]),
        case_insensitive=prop("boolean", "Ignore case (default false)."),
        context=prop("integer", "Lines of context around each match (content mode).",
                     minimum=0, maximum=20),
        head_limit=prop("integer", f"At most this many output lines (default "
                        f"{DEFAULT_GREP_LIMIT}).", minimum=1),
    )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            regex = re.compile(args["pattern"], re.IGNORECASE if args.get("case_insensitive")
                               else 0)
        except re.error as exc:
            return self.error(f"bad regular expression: {exc}")
        try:
            target = self.resolve(args, ctx)
        except PathEscape as exc:
            return self.error(str(exc))
        if target.is_dir():
            files = list_files(target, ctx)
            if args.get("glob"):
                files = [f for f in files if glob_match(args["glob"],
                                                        f.relative_to(target).as_posix())]
        elif target.is_file():
            files = [target]
        else:
            return self.error(f"not found: {args.get('path')}")
        mode = args.get("output_mode", "files_with_matches")
        limit = args.get("head_limit", DEFAULT_GREP_LIMIT)
        out: list[str] = []
        for f in sorted(files):
            lines = _text_lines(f)
            if lines is None:
                continue
            hits = [i for i, line in enumerate(lines) if regex.search(line)]
            if not hits:
                continue
            name = shown(f.absolute(), ctx.cwd)
            if mode == "files_with_matches":
                out.append(name)
            elif mode == "count":
                out.append(f"{name}:{len(hits)}")
            else:
                out += _content(name, lines, hits, args.get("context", 0))
        if not out:
            return ToolResult(f"no matches for {args['pattern']}")
        more = len(out) - limit
        out = out[:limit]
        if more > 0:
            out.append(f"({more} more lines not shown; narrow the search or raise head_limit)")
        return ToolResult("\n".join(out))


def _text_lines(path: Path) -> list[str] | None:
    try:
        if path.stat().st_size > MAX_GREP_FILE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    return None if is_binary(data) else decode(data).splitlines()


def _content(name: str, lines: list[str], hits: list[int], context: int) -> list[str]:
    shown_lines: dict[int, bool] = {}
    for i in hits:
        for j in range(max(0, i - context), min(len(lines), i + context + 1)):
            shown_lines[j] = shown_lines.get(j, False) or j == i
    out, last = [], -2
    for j in sorted(shown_lines):
        if context and last >= 0 and j != last + 1:
            out.append("--")
        sep = ":" if shown_lines[j] else "-"
        out.append(f"{name}{sep}{j + 1}{sep}{lines[j][:500]}")
        last = j
    return out


class LsTool(PathTool):
    name = "ls"
    path_arg = "path"
    description = (
        "List a folder: sub-folders first (with a trailing /), then files with their size; "
        "`.git` is left out. One level; use glob to search deeper."
    )
    input_schema = obj(
        [],
        path=prop("string", "Folder to list (default: the working directory)."),
        ignore=prop("array", "Glob patterns of names to leave out.",
                    items=prop("string", "A glob pattern.")),
    )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            folder = self.resolve(args, ctx)
            entries = sorted(os.scandir(folder), key=lambda e: (not e.is_dir(), e.name))
        except PathEscape as exc:
            return self.error(str(exc))
        except NotADirectoryError:
            return self.error(f"not a folder: {args.get('path')}")
        except OSError as exc:
            return self.error(f"cannot list {args.get('path', '.')}: {exc.strerror}")
        ignore = args.get("ignore", [])
        lines = []
        for e in entries:
            if e.name == ".git" or any(glob_match(p, e.name) for p in ignore):
                continue
            if e.is_symlink():
                lines.append(f"{e.name} -> {os.readlink(e.path)}")
            elif e.is_dir():
                lines.append(e.name + "/")
            else:
                lines.append(f"{e.name}  ({e.stat().st_size} bytes)")
        if not lines:
            return ToolResult(f"{shown(folder, ctx.cwd)} is empty")
        more = len(lines) - MAX_LS_ENTRIES
        lines = lines[:MAX_LS_ENTRIES] + ([f"({more} more not shown)"] if more > 0 else [])
        return ToolResult("\n".join(lines))
