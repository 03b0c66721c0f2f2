"""``orchestrator demo``: a whole team run, offline, in seconds.

It builds a small Python project (a temporary folder, or ``--dir``), drops four
tasks on its board — the second blocked by the first, so it starts from the
first one's branch — and runs ``orchestrator up --burst -n 2`` with the
``scripted`` backend. Each task carries its script (``metadata.script``): the
scripted model reads, edits and tests through the same loop, tools, permission
gate and sandbox as the real model, the teammates commit, verify with the
project's tests and keep each branch for review. Then it prints the review table.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.adding import add_task
from orchestrator.board import init_repo, open_board
from orchestrator.errors import Conflict, GitError
from orchestrator.git import Git
from orchestrator.layout import Layout
from orchestrator.model import Status

RUN_TIMEOUT = 300.0
TEST = "python3 -m unittest -q"

FILES = {
    "calc.py": '"""A tiny calculator."""\n\n\ndef add(a, b):\n    return a + b\n\n\n'
               'def sub(a, b):\n    return a - b\n\n\n# more operations go here\n',
    "test_calc.py": "import unittest\n\nimport calc\n\n\nclass CalcTest(unittest.TestCase):\n"
                    "    def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n\n"
                    "    # more tests go here\n\n\nif __name__ == '__main__':\n"
                    "    unittest.main()\n",
    "README.md": "# calc\n\nA tiny calculator.\n",
    ".gitignore": "__pycache__/\n*.pyc\n",
    "orchestrator.toml": f'[team]\nbackend = "scripted"\nteammates = 2\nverify = "{TEST}"\n\n'
                         f'[agent]\npermission_mode = "acceptEdits"\n'
                         f'allow = ["Bash({TEST}:*)"]\n',
}


def _edit(path: str, old: str, new: str) -> dict[str, Any]:
    return {"tool": "edit", "args": {"file_path": path, "old_string": old, "new_string": new}}


def _op(name: str, body: str, test: str) -> list[Any]:
    """Read, add a function before the marker, add its test, run the tests, report."""
    return [
        ["I'll look at the code first.", {"tool": "read", "args": {"file_path": "calc.py"}}],
        [_edit("calc.py", "# more operations go here\n",
               f"def {name}(a, b):\n{body}\n\n\n# more operations go here\n"),
         _edit("test_calc.py", "    # more tests go here\n",
               f"    def test_{name}(self):\n{test}\n\n    # more tests go here\n")],
        [{"tool": "bash", "args": {"command": TEST}}],
        f"Added calc.{name} with a test; the test suite passes.",
    ]


TASKS: list[dict[str, Any]] = [
    {"subject": "Add a multiply operation",
     "description": "calc.multiply(a, b), with a unit test.",
     "script": _op("multiply", "    return a * b",
                   "        self.assertEqual(calc.multiply(4, 5), 20)")},
    {"subject": "Add a divide operation that refuses zero",
     "description": "calc.divide(a, b) raising ZeroDivisionError for b == 0. Builds on multiply.",
     "blocked_by": [0],
     "script": _op("divide", "    if b == 0:\n        raise ZeroDivisionError('divide by zero')\n"
                   "    return a / b",
                   "        self.assertEqual(calc.divide(9, 3), 3)\n"
                   "        with self.assertRaises(ZeroDivisionError):\n"
                   "            calc.divide(1, 0)")},
    {"subject": "Start a changelog",
     "script": [[{"tool": "ls", "args": {}}],
                [{"tool": "write", "args": {"file_path": "CHANGELOG.md", "content":
                  "# Changelog\n\n## Unreleased\n\n- multiply and divide operations\n"}}],
                "Wrote CHANGELOG.md."]},
    {"subject": "Document usage in the README",
     "script": [[{"tool": "grep", "args": {"pattern": "^def ", "path": "."}}],
                [_edit("README.md", "A tiny calculator.\n",
                       "A tiny calculator.\n\n```python\nimport calc\ncalc.add(2, 3)  # 5\n```\n")],
                "Added a usage example to README.md."]},
]


@dataclass
class Row:
    id: str
    subject: str
    status: str
    branch: str
    changes: str
    checks: str
    cost: str


def create_project(path: Path | None = None) -> Layout:
    """The sample repository with its four tasks, in ``path`` (default: a new temporary
    folder); `Conflict` when ``path`` is not empty."""
    path = (path or Path(tempfile.mkdtemp(prefix="orchestrator-demo-"))).resolve()
    if path.exists() and any(path.iterdir()):
        raise Conflict(f"{path} is not empty; give --dir a new or empty folder")
    path.mkdir(parents=True, exist_ok=True)
    for name, text in FILES.items():
        (path / name).write_text(text)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=demo", "-c", "user.email=demo@example.com",
                  "commit", "-q", "-m", "calc: add and sub"]):
        _git(path, *args)
    layout = init_repo(path)
    board = open_board(layout, actor="demo")
    try:
        ids: list[str] = []
        for spec in TASKS:
            task = add_task(layout, None, board, spec["subject"],
                            description=spec.get("description", ""),
                            blocked_by=[ids[i] for i in spec.get("blocked_by", [])],
                            metadata={"script": spec["script"]}, actor="demo")
            ids.append(task.id)
    finally:
        board.close()
    return layout


def run_team(layout: Layout, teammates: int = 2) -> int:
    """``orchestrator up --burst -n N`` in the project, as a user would type it."""
    cmd = [sys.executable, "-m", "orchestrator", "up", "--burst", "-n", str(teammates),
           "-C", str(layout.root)]
    sys.stdout.flush()
    return subprocess.run(cmd, cwd=layout.root, timeout=RUN_TIMEOUT, check=False,
                          stdin=subprocess.DEVNULL).returncode


def review_rows(layout: Layout) -> list[Row]:
    board = open_board(layout, actor="demo")
    try:
        tasks = board.list()
    finally:
        board.close()
    rows = []
    for t in tasks:
        changes = ""
        if t.branch and t.base_commit:
            changes = _git(layout.root, "diff", "--shortstat", f"{t.base_commit}...{t.branch}")
            changes = changes.replace(" changed", "").replace("insertions(+)", "+").replace(
                "insertion(+)", "+").replace("deletions(-)", "-").replace("deletion(-)", "-")
        checks = "" if not t.checks else ("passed" if t.checks.passed else "failed")
        rows.append(Row(t.id, t.subject, str(t.status), t.branch or "", changes.strip(), checks,
                        f"${t.usage.cost_usd:.2f}"))
    return rows


def table(rows: list[Row]) -> str:
    head = Row("task", "subject", "status", "branch", "changes", "checks", "cost")
    cols = list(vars(head))
    width = {c: max(len(str(getattr(r, c))) for r in [head, *rows]) for c in cols}
    lines = ["  ".join(str(getattr(r, c)).ljust(width[c]) for c in cols).rstrip()
             for r in [head, *rows]]
    return "\n".join(lines)


def all_in_review(rows: list[Row]) -> bool:
    return all(r.status == Status.REVIEW for r in rows)


def as_json(layout: Layout, code: int, rows: list[Row]) -> dict[str, Any]:
    return {"dir": str(layout.root), "exit_code": code, "tasks": [vars(r) for r in rows]}


def _git(cwd: Path, *args: str) -> str:
    out = Git(cwd).run(*args, check=False)
    if out.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout.strip()

