"""File tools: read, write, edit, multi_edit. Paths are confined to the worktree.

Writes are atomic, keep the file's permission bits and its newline style (a
CRLF file stays CRLF whatever line ends the model sends). Non-UTF-8 bytes
survive an edit unchanged.
"""

from __future__ import annotations

from typing import Any

from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.agent.paths import PathEscape, shown
from orchestrator.agent.tools.common import (
    PathTool,
    decode,
    is_binary,
    obj,
    prop,
    to_style,
    uses_crlf,
    write_file,
)

DEFAULT_READ_LINES = 2000
MAX_LINE_CHARS = 2000

_PATH = prop("string", "Path of the file, relative to the working directory (or absolute "
             "inside it).")


class ReadTool(PathTool):
    name = "read"
    description = (
        "Read a text file. Returns lines as `cat -n` does (line number, tab, text). By default "
        f"the first {DEFAULT_READ_LINES} lines; use offset/limit for more of a long file. Lines "
        f"over {MAX_LINE_CHARS} characters are cut. Binary files are refused."
    )
    input_schema = obj(
        ["file_path"],
        file_path=_PATH,
        offset=prop("integer", "First line to show (1-based).", minimum=1),
        limit=prop("integer", "How many lines to show.", minimum=1),
    )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            path = self.resolve(args, ctx)
            data = path.read_bytes()
        except PathEscape as exc:
            return self.error(str(exc))
        except FileNotFoundError:
            return self.error(f"file not found: {args['file_path']}")
        except IsADirectoryError:
            return self.error(f"{args['file_path']} is a folder; use ls to list it")
        except OSError as exc:
            return self.error(f"cannot read {args['file_path']}: {exc.strerror}")
        if is_binary(data):
            return self.error(f"{args['file_path']} is a binary file ({len(data)} bytes); "
                              "not shown")
        lines = decode(data).split("\n")
        if lines[-1] == "":
            lines.pop()
        if not lines:
            return ToolResult(f"({args['file_path']} is empty)")
        start = args.get("offset", 1)
        end = min(len(lines), start - 1 + args.get("limit", DEFAULT_READ_LINES))
        if start > len(lines):
            return self.error(f"offset {start} is past the end ({len(lines)} lines)")
        out = [f"{n:6}\t{_cut(lines[n - 1].rstrip(chr(13)))}" for n in range(start, end + 1)]
        if start > 1 or end < len(lines):
            out.append(f"(lines {start}-{end} of {len(lines)}; use offset/limit to see more)")
        return ToolResult("\n".join(out))


def _cut(line: str) -> str:
    if len(line) <= MAX_LINE_CHARS:
        return line
    return f"{line[:MAX_LINE_CHARS]}… [line cut: {len(line)} chars]"


class WriteTool(PathTool):
    name = "write"
    read_only = False
    edits_files = True
    description = (
        "Write a whole file, creating it and its folders if needed, or replacing it. For "
        "changes to an existing file prefer edit. An existing file keeps its line-ending style."
    )
    input_schema = obj(
        ["file_path", "content"],
        file_path=_PATH,
        content=prop("string", "The complete new content of the file."),
    )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            path = self.resolve(args, ctx)
            existed = path.exists()
            if path.is_dir():
                return self.error(f"{args['file_path']} is a folder")
            text = args["content"]
            if existed:
                text = to_style(text, uses_crlf(decode(path.read_bytes())))
            path.parent.mkdir(parents=True, exist_ok=True)
            write_file(path, text)
        except PathEscape as exc:
            return self.error(str(exc))
        except OSError as exc:
            return self.error(f"cannot write {args['file_path']}: {exc.strerror or exc}")
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        verb = "wrote" if existed else "created"
        return ToolResult(f"{verb} {shown(path, ctx.cwd)} ({lines} lines)")


class EditError(ValueError):
    pass


def apply_edit(text: str, old: str, new: str, replace_all: bool = False) -> tuple[str, int, int]:
    """``text`` with ``old`` replaced (unique unless ``replace_all``); also returns how many
    replacements were made and the line of the first. Raises `EditError` saying why not."""
    if old == "":
        raise EditError("old_string is empty; to create a file use write")
    if old == new:
        raise EditError("old_string and new_string are the same; nothing to change")
    crlf = uses_crlf(text)
    old, new = to_style(old, crlf), to_style(new, crlf)
    count = text.count(old)
    if count == 0:
        raise EditError("old_string not found in the file (it must match exactly, "
                        "including whitespace and indentation; read the file again)")
    if count > 1 and not replace_all:
        raise EditError(f"old_string matches {count} times; add surrounding lines to make it "
                        "unique, or set replace_all to change every one")
    line = text[: text.index(old)].count("\n") + 1
    return text.replace(old, new), count, line


class _EditBase(PathTool):
    read_only = False
    edits_files = True

    def _load(self, args: dict[str, Any], ctx: ToolContext) -> tuple[Any, str]:
        path = self.resolve(args, ctx)
        if path.is_dir():
            raise EditError(f"{args['file_path']} is a folder")
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise EditError(f"file not found: {args['file_path']} (use write to create it)") \
                from None
        if is_binary(data):
            raise EditError(f"{args['file_path']} is a binary file")
        return path, decode(data)

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            path, text = self._load(args, ctx)
            new_text, summary = self._change(args, text)
            write_file(path, new_text)
        except (PathEscape, EditError) as exc:
            return self.error(str(exc))
        except OSError as exc:
            return self.error(f"cannot edit {args['file_path']}: {exc.strerror or exc}")
        return ToolResult(f"edited {shown(path, ctx.cwd)}: {summary}")

    def _change(self, args: dict[str, Any], text: str) -> tuple[str, str]:
        raise NotImplementedError


_OLD = prop("string", "The exact text to replace (whitespace included); it must be unique in "
            "the file unless replace_all is set.")
_NEW = prop("string", "The text to put in its place.")
_ALL = prop("boolean", "Replace every occurrence instead of exactly one (default false).")


class EditTool(_EditBase):
    name = "edit"
    description = (
        "Replace one exact piece of text in a file. Fails, changing nothing, when the text is "
        "not found or found more than once (unless replace_all). Keeps the file's line endings."
    )
    input_schema = obj(["file_path", "old_string", "new_string"], file_path=_PATH,
                       old_string=_OLD, new_string=_NEW, replace_all=_ALL)

    def _change(self, args: dict[str, Any], text: str) -> tuple[str, str]:
        out, count, line = apply_edit(text, args["old_string"], args["new_string"],
                                      args.get("replace_all", False))
        return out, f"{count} replacement{'s' if count > 1 else ''} (first at line {line})"


class MultiEditTool(_EditBase):
    name = "multi_edit"
    description = (
        "Several edits to one file, applied in order, each on the result of the one before. "
        "All or nothing: if any edit fails the file is left unchanged."
    )
    input_schema = obj(
        ["file_path", "edits"],
        file_path=_PATH,
        edits=prop("array", "The edits, in order.", minItems=1, items=obj(
            ["old_string", "new_string"], old_string=_OLD, new_string=_NEW, replace_all=_ALL)),
    )

    def _change(self, args: dict[str, Any], text: str) -> tuple[str, str]:
        total = 0
        for i, e in enumerate(args["edits"], 1):
            try:
                text, count, _ = apply_edit(text, e["old_string"], e["new_string"],
                                            e.get("replace_all", False))
            except EditError as exc:
                raise EditError(f"edit {i} of {len(args['edits'])}: {exc}; "
                                "no edit was applied") from None
            total += count
        return text, f"{len(args['edits'])} edits, {total} replacements"
