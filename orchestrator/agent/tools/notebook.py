"""``notebook_edit``: replace, insert or delete one cell of a Jupyter notebook.

The notebook stays valid nbformat 4 JSON: every cell has ``cell_type``,
``metadata`` and ``source``; code cells also ``outputs`` and
``execution_count``; from nbformat 4.5 on every cell has a unique ``id``
(new cells get one). Replacing a code cell's source clears its outputs and
execution count (they belonged to the old code); changing a cell's type adds
or drops those fields. The file is written atomically with Jupyter's layout
(one-space indent, non-ASCII kept), keys in the order they were read.

A cell is named by ``cell_id`` or by 0-based ``index``. ``insert`` puts the new
cell at ``index`` (``index`` = number of cells appends), or right after
``cell_id``, or at the end when neither is given.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, cast

from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.agent.tools.common import PathTool, obj, prop, write_file

CELL_TYPES = ("code", "markdown", "raw")
MODES = ("replace", "insert", "delete")
CELL_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


class NotebookError(Exception):
    """The notebook or the edit is not valid; the message is what the model sees."""


class NotebookEditTool(PathTool):
    name = "notebook_edit"
    path_arg = "notebook_path"
    read_only = False
    edits_files = True
    description = (
        "Edit one cell of a Jupyter notebook (.ipynb): replace its source, insert a new "
        "cell, or delete a cell. Name the cell by cell_id or by 0-based index. Replacing a "
        "code cell clears its outputs."
    )
    input_schema = obj(
        ["notebook_path"],
        notebook_path=prop("string", "The notebook, relative to the working directory."),
        edit_mode=prop("string", "replace (default), insert or delete.", enum=list(MODES)),
        cell_id=prop("string", "The id of the cell to change (for insert: the new cell "
                               "goes after it)."),
        index=prop("integer", "0-based position of the cell (for insert: where the new cell "
                              "goes).", minimum=0),
        new_source=prop("string", "The cell's new source (replace, insert)."),
        cell_type=prop("string", "code, markdown or raw (insert: default code; replace: "
                                 "default unchanged).", enum=list(CELL_TYPES)),
    )

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = self.resolve(args, ctx)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return self.error(f"no such notebook: {args['notebook_path']}")
        except (OSError, UnicodeDecodeError) as exc:
            return self.error(f"cannot read {args['notebook_path']}: {exc}")
        try:
            nb = load(raw)
            message = edit(nb, args)
            validate(nb)
        except NotebookError as exc:
            return self.error(str(exc))
        write_file(path, dump(nb))
        return ToolResult(f"{message} in {args['notebook_path']} ({len(nb['cells'])} cells)")


def load(raw: str) -> dict[str, Any]:
    try:
        nb = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise NotebookError(f"not a notebook: invalid JSON ({exc})") from None
    validate(nb)
    return cast(dict[str, Any], nb)


def dump(nb: dict[str, Any]) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def validate(nb: Any) -> None:
    """Raise `NotebookError` unless ``nb`` has the structure nbformat 4 requires."""
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotebookError("not a notebook: no 'cells' list")
    if nb.get("nbformat") != 4 or not isinstance(nb.get("nbformat_minor"), int):
        raise NotebookError(f"only nbformat 4 notebooks can be edited "
                            f"(this one says nbformat {nb.get('nbformat')!r})")
    if not isinstance(nb.get("metadata"), dict):
        raise NotebookError("not a notebook: 'metadata' must be an object")
    ids: set[str] = set()
    for i, cell in enumerate(nb["cells"]):
        if problem := _cell_problem(cell):
            raise NotebookError(f"cell {i}: {problem}")
        if nb["nbformat_minor"] < 5:
            continue
        cid = cell.get("id")
        if not isinstance(cid, str) or not CELL_ID_RE.fullmatch(cid) or cid in ids:
            raise NotebookError(f"cell {i}: nbformat 4.5+ needs a unique id of 1-64 letters, "
                                f"digits, - or _ (got {cid!r})")
        ids.add(cid)


def _cell_problem(cell: Any) -> str | None:
    if not isinstance(cell, dict) or cell.get("cell_type") not in CELL_TYPES:
        return f"cell_type must be one of {', '.join(CELL_TYPES)}"
    if not isinstance(cell.get("metadata"), dict):
        return "'metadata' must be an object"
    source = cell.get("source")
    if not isinstance(source, str) and not (
            isinstance(source, list) and all(isinstance(s, str) for s in source)):
        return "'source' must be a string or a list of strings"
    if cell["cell_type"] != "code":
        has_outputs = "outputs" in cell or "execution_count" in cell
        return f"a {cell['cell_type']} cell has no outputs" if has_outputs else None
    if not isinstance(cell.get("outputs"), list):
        return "a code cell needs an 'outputs' list"
    count = cell.get("execution_count", "missing")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool)):
        return "'execution_count' must be an integer or null"
    return None


def edit(nb: dict[str, Any], args: dict[str, Any]) -> str:
    """Apply the edit in place; returns what was done."""
    cells: list[dict[str, Any]] = nb["cells"]
    mode = args.get("edit_mode", "replace")
    if mode == "insert":
        if "new_source" not in args:
            raise NotebookError("insert needs new_source")
        at = _insert_position(cells, args)
        cell = new_cell(args.get("cell_type", "code"), args["new_source"], nb, cells)
        cells.insert(at, cell)
        return f"inserted {cell['cell_type']} cell {at}" + _id_note(cell)
    at = _find(cells, args)
    if mode == "delete":
        cell = cells.pop(at)
        return f"deleted {cell['cell_type']} cell {at}" + _id_note(cell)
    if "new_source" not in args:
        raise NotebookError("replace needs new_source")
    cell = cells[at]
    set_type(cell, args.get("cell_type", cell["cell_type"]))
    cell["source"] = source_lines(args["new_source"])
    if cell["cell_type"] == "code":
        cell["outputs"], cell["execution_count"] = [], None
    return f"replaced {cell['cell_type']} cell {at}" + _id_note(cell)


def new_cell(kind: str, source: str, nb: dict[str, Any], cells: list[dict[str, Any]]
             ) -> dict[str, Any]:
    cell: dict[str, Any] = {"cell_type": kind}
    if nb["nbformat_minor"] >= 5:
        taken = {c.get("id") for c in cells}
        cell["id"] = next(i for i in iter(lambda: uuid.uuid4().hex[:8], None) if i not in taken)
    cell["metadata"] = {}
    if kind == "code":
        cell["execution_count"], cell["outputs"] = None, []
    cell["source"] = source_lines(source)
    return cell


def set_type(cell: dict[str, Any], kind: str) -> None:
    if kind == cell["cell_type"]:
        return
    cell["cell_type"] = kind
    if kind == "code":
        cell.pop("attachments", None)  # only markdown and raw cells carry attachments
        cell.setdefault("execution_count", None)
        cell.setdefault("outputs", [])
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)


def source_lines(text: str) -> list[str]:
    """The source as Jupyter stores it: lines that keep their line ends."""
    return text.splitlines(keepends=True)


def _find(cells: list[dict[str, Any]], args: dict[str, Any]) -> int:
    if "cell_id" in args:
        for i, cell in enumerate(cells):
            if cell.get("id") == args["cell_id"]:
                if "index" in args and args["index"] != i:
                    raise NotebookError(f"cell {args['cell_id']!r} is at index {i}, "
                                        f"not {args['index']}")
                return i
        ids = [str(c["id"]) for c in cells if c.get("id")]
        raise NotebookError(f"no cell with id {args['cell_id']!r}"
                            + (f" (ids: {', '.join(ids[:20])})" if ids
                               else " (this notebook has no cell ids: use index)"))
    if "index" not in args:
        raise NotebookError("name the cell with cell_id or index")
    if args["index"] >= len(cells):
        raise NotebookError(f"index {args['index']} is out of range: the notebook has "
                            f"{len(cells)} cells (0-{len(cells) - 1})" if cells
                            else "the notebook has no cells")
    return int(args["index"])


def _insert_position(cells: list[dict[str, Any]], args: dict[str, Any]) -> int:
    if "cell_id" in args:
        return _find(cells, {"cell_id": args["cell_id"]}) + 1
    at = args.get("index", len(cells))
    if at > len(cells):
        raise NotebookError(f"index {at} is out of range for insert: 0-{len(cells)}")
    return int(at)


def _id_note(cell: dict[str, Any]) -> str:
    return f" (id {cell['id']})" if cell.get("id") else ""
