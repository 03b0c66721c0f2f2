"""``notebook_edit``: cell by cell, the notebook stays valid nbformat 4 (checked by hand)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.base import ToolContext
from orchestrator.agent.permissions import PermissionGate
from orchestrator.agent.tools.notebook import NotebookEditTool
from orchestrator.agent.toolset import Toolset
from tests.loopback import LoopbackAPI, tool_use
from tests.test_backend_agent import ClaimFn, api, claim  # noqa: F401 (fixtures)

ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def notebook(minor: int = 5) -> dict[str, Any]:
    def cell(kind: str, source: list[str], cid: str, **extra: Any) -> dict[str, Any]:
        c: dict[str, Any] = {"cell_type": kind, "metadata": {}, "source": source, **extra}
        if minor >= 5:
            c["id"] = cid
        return c

    return {
        "cells": [
            cell("markdown", ["# Analysis\n", "Load the data."], "intro"),
            cell("code", ["import pandas as pd\n", "df = pd.read_csv('x.csv')"], "load",
                 execution_count=3, outputs=[{"output_type": "stream", "name": "stdout",
                                              "text": ["loaded\n"]}]),
            cell("code", ["df.describe()"], "describe", execution_count=4, outputs=[]),
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "nbformat": 4, "nbformat_minor": minor,
    }


def check_valid(nb: dict[str, Any]) -> None:
    """The nbformat 4 structure, checked by hand (nbformat itself is not installed)."""
    assert set(nb) >= {"cells", "metadata", "nbformat", "nbformat_minor"}
    assert nb["nbformat"] == 4 and isinstance(nb["metadata"], dict)
    ids = [c.get("id") for c in nb["cells"]]
    if nb["nbformat_minor"] >= 5:
        assert all(isinstance(i, str) and ID_RE.match(i) for i in ids), ids
        assert len(set(ids)) == len(ids), ids
    for c in nb["cells"]:
        assert c["cell_type"] in ("code", "markdown", "raw")
        assert isinstance(c["metadata"], dict)
        assert isinstance(c["source"], list) and all(isinstance(s, str) for s in c["source"])
        allowed = {"cell_type", "metadata", "source", "id", "attachments"}
        if c["cell_type"] == "code":
            assert isinstance(c["outputs"], list)
            assert c["execution_count"] is None or isinstance(c["execution_count"], int)
            allowed = (allowed - {"attachments"}) | {"outputs", "execution_count"}
        assert set(c) <= allowed, set(c) - allowed


def load(path: Path) -> dict[str, Any]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    check_valid(nb)
    return nb


def sources(nb: dict[str, Any]) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"]]


@pytest.fixture
def nb_path(tmp_path: Path) -> Path:
    path = tmp_path / "analysis.ipynb"
    path.write_text(json.dumps(notebook(), indent=1) + "\n")
    return path


def toolset(root: Path, mode: str = "acceptEdits", **rules: list[str]) -> Toolset:
    return Toolset([NotebookEditTool()], PermissionGate.from_rules(mode=mode, root=root, **rules),
                   ToolContext(cwd=root, env={}))


def edit(root: Path, **args: Any) -> Any:
    return toolset(root).call("notebook_edit", {"notebook_path": "analysis.ipynb", **args})


def test_a_notebook_edited_cell_by_cell_through_the_api_stays_loadable(
        claim: ClaimFn, api: LoopbackAPI) -> None:  # noqa: F811
    c = claim(agent={"model": "claude-sonnet-4-6"})
    path = c.workspace.path / "analysis.ipynb"
    path.write_text(json.dumps(notebook(), indent=1) + "\n")
    steps = [
        {"cell_id": "load", "new_source": "import polars as pl\ndf = pl.read_csv('x.csv')\n"},
        {"edit_mode": "insert", "index": 3, "new_source": "df.head()"},
        {"edit_mode": "insert", "cell_id": "intro", "cell_type": "markdown",
         "new_source": "## Setup"},
        {"edit_mode": "delete", "cell_id": "describe"},
        {"index": 0, "cell_type": "raw", "new_source": "raw intro"},
    ]
    for i, args in enumerate(steps):
        api.reply(tool_use("notebook_edit", {"notebook_path": "analysis.ipynb", **args},
                           id=f"n{i}"))
    api.reply("Edited the notebook.")
    result = c.run("anthropic")
    assert result.ok, result.error
    replies = [api.requests[i + 1]["messages"][-1]["content"][0] for i in range(len(steps))]
    assert not any(r.get("is_error") for r in replies), replies
    nb = load(path)
    assert sources(nb) == ["raw intro", "## Setup",
                           "import polars as pl\ndf = pl.read_csv('x.csv')\n", "df.head()"]
    assert [c["cell_type"] for c in nb["cells"]] == ["raw", "markdown", "code", "code"]
    replaced = nb["cells"][2]
    assert replaced["id"] == "load" and replaced["outputs"] == [] and (
        replaced["execution_count"] is None)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    assert len(c.events("file_modified")) == len(steps)


def test_changing_a_cell_type_adds_or_drops_the_code_fields(nb_path: Path) -> None:
    assert not edit(nb_path.parent, index=2, cell_type="markdown", new_source="text").is_error
    cell = load(nb_path)["cells"][2]
    assert "outputs" not in cell and "execution_count" not in cell
    assert not edit(nb_path.parent, index=0, cell_type="code", new_source="x = 1").is_error
    cell = load(nb_path)["cells"][0]
    assert cell["outputs"] == [] and cell["execution_count"] is None


def test_an_old_minor_version_gets_no_ids(tmp_path: Path) -> None:
    path = tmp_path / "analysis.ipynb"
    path.write_text(json.dumps(notebook(minor=4)))
    result = edit(tmp_path, edit_mode="insert", new_source="print(1)")
    assert not result.is_error
    nb = load(path)
    assert len(nb["cells"]) == 4 and "id" not in nb["cells"][3]
    bad = edit(tmp_path, cell_id="intro", new_source="x")
    assert bad.is_error and "no cell ids: use index" in bad.content


def test_unicode_survives_and_layout_is_jupyters(nb_path: Path) -> None:
    assert not edit(nb_path.parent, index=0, new_source="# Café ☕\n").is_error
    raw = nb_path.read_text(encoding="utf-8")
    assert "Café ☕" in raw and raw.endswith("}\n") and '\n "cells": [' in raw


@pytest.mark.parametrize(("args", "expected"), [
    ({"index": 3, "new_source": "x"}, "index 3 is out of range: the notebook has 3 cells"),
    ({"cell_id": "nope", "new_source": "x"}, "no cell with id 'nope' (ids: intro, load"),
    ({"new_source": "x"}, "name the cell with cell_id or index"),
    ({"index": 0}, "replace needs new_source"),
    ({"edit_mode": "insert"}, "insert needs new_source"),
    ({"edit_mode": "insert", "index": 9, "new_source": "x"}, "out of range for insert: 0-3"),
    ({"cell_id": "load", "index": 0, "new_source": "x"}, "is at index 1, not 0"),
    ({"index": 0, "new_source": "x", "cell_type": "script"}, "cell_type must be one of"),
    ({"edit_mode": "move", "index": 0}, "edit_mode must be one of"),
])
def test_bad_edits_leave_the_file_untouched(nb_path: Path, args: dict[str, Any],
                                            expected: str) -> None:
    before = nb_path.read_bytes()
    result = edit(nb_path.parent, **args)
    assert result.is_error and expected in result.content, result.content
    assert nb_path.read_bytes() == before


@pytest.mark.parametrize(("content", "expected"), [
    ("{not json", "invalid JSON"),
    (json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "cells": []}),
     "only nbformat 4"),
    (json.dumps({"worksheets": []}), "no 'cells' list"),
    (json.dumps({**notebook(), "cells": [{"cell_type": "code", "metadata": {}, "source": "",
                                          "id": "a"}]}), "needs an 'outputs' list"),
    *((json.dumps({**notebook(), "cells": cells}), expected) for cells, expected in [
        ([{"cell_type": "code", "metadata": {}, "source": "", "id": "a", "outputs": [],
           "execution_count": True}], "'execution_count' must be an integer or null"),
        ([{"cell_type": "markdown", "metadata": {}, "source": [], "id": "a", "outputs": []}],
         "a markdown cell has no outputs"),
        ([{"cell_type": "raw", "metadata": {}, "source": ["x", 1], "id": "a"}],
         "'source' must be a string or a list of strings"),
        ([{"cell_type": "raw", "metadata": {}, "source": "", "id": i} for i in ("a", "a")],
         "cell 1: nbformat 4.5+ needs a unique id"),
        ([{"cell_type": "raw", "metadata": {}, "source": "", "id": "a\n"}],
         "cell 0: nbformat 4.5+ needs a unique id"),
        ([{"cell_type": "raw", "metadata": [], "source": "", "id": "a"}],
         "'metadata' must be an object"),
        (["x"], "cell_type must be one of"),
    ]),
])
def test_broken_notebooks_are_refused(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "analysis.ipynb"
    path.write_text(content)
    result = edit(tmp_path, index=0, new_source="x")
    assert result.is_error and expected in result.content
    assert path.read_text() == content


def test_a_missing_notebook_and_paths_outside_the_worktree(tmp_path: Path) -> None:
    missing = edit(tmp_path, index=0, new_source="x")
    assert missing.is_error and "no such notebook" in missing.content
    outside = toolset(tmp_path).call("notebook_edit", {"notebook_path": "../x.ipynb",
                                                       "index": 0, "new_source": "x"})
    assert outside.is_error and "outside" in outside.content


def test_it_is_an_edit_for_the_gate(nb_path: Path) -> None:
    plan = toolset(nb_path.parent, mode="plan").call(
        "notebook_edit", {"notebook_path": "analysis.ipynb", "index": 0, "new_source": "x"})
    assert plan.is_error and "plan mode is read-only" in plan.content
    denied = toolset(nb_path.parent, deny=["Edit(*.ipynb)"]).call(
        "notebook_edit", {"notebook_path": "analysis.ipynb", "index": 0, "new_source": "x"})
    assert denied.is_error and "deny rule Edit(*.ipynb)" in denied.content
