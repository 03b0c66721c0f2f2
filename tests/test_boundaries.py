"""The seams the code promises, checked on the source itself.

- Only `orchestrator.board` knows how the control plane is stored: no other module
  builds a path under ``.tasks/`` or opens ``events.jsonl`` (it goes through the
  `ControlPlane` that `open_board` returns).
- Packages import in one direction: nothing outside `cli/` imports the CLI, and
  `review/` and `team/` do not import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "orchestrator"
BOARD_ONLY = ("tasks", "inbox", "rejected", "mailboxes", "logs", "seq", "events", "task_file")
"""`Layout` members that are the file board's storage."""
STORAGE_WORDS = (".tasks", "events.jsonl")
OWNERS = ("board/", "layout.py")
BOARD_INTERNALS = ("eventlog", "mailboxes", "tasklogs", "teamstatus", "requests", "store",
                   "feed", "intake", "index")
"""Modules of the file board that nothing outside `board/` imports (the lead reaches the
inbox through the control plane: `intake`, `rejected_drops`, `settling`)."""
SHIMS = {"team/mailbox.py"}
"""Old import paths kept for code written against them (names only, no paths)."""


def sources() -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        out.append((rel, ast.parse(path.read_text(), filename=rel)))
    return out


def docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value,
                                                                      ast.Constant):
                ids.add(id(body[0].value))
        # attribute docstrings: a bare string after an assignment
        for field in ("body",):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list):
                for st in stmts:
                    if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
                        ids.add(id(st.value))
    return ids


def _ends_in_layout(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "layout"
    return isinstance(node, ast.Attribute) and node.attr == "layout"


def storage_uses(rel: str, tree: ast.Module) -> list[str]:
    found = []
    docs = docstrings(tree)
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs and any(w in node.value for w in STORAGE_WORDS):
            found.append(f"{where} names {node.value!r}")
        if isinstance(node, ast.Attribute) and node.attr in BOARD_ONLY \
                and _ends_in_layout(node.value) and node.attr != "tasks":
            found.append(f"{where} uses layout.{node.attr}")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) \
                and isinstance(node.left, ast.Attribute) and node.left.attr == "tasks" \
                and _ends_in_layout(node.left.value):
            found.append(f"{where} builds a path under layout.tasks")
        if isinstance(node, ast.ImportFrom) and node.module and rel not in SHIMS:
            mod = node.module.split(".")
            if mod[:2] == ["orchestrator", "board"] and len(mod) > 2 \
                    and mod[2] in BOARD_INTERNALS:
                found.append(f"{where} imports {node.module}")
    return found


def test_only_the_board_knows_where_the_control_plane_is_stored() -> None:
    found = [f for rel, tree in sources() if not rel.startswith(OWNERS)
             for f in storage_uses(rel, tree)]
    assert found == []


def test_the_check_finds_what_it_looks_for() -> None:
    bad = ast.parse('from orchestrator.board.eventlog import EventLog\n'
                    'p = layout.events\nq = self.layout.tasks / "x"\nr = ".tasks/inbox"\n'
                    'def f():\n    """.tasks/ in a docstring is fine"""\n')
    assert len(storage_uses("x.py", bad)) == 4


def imports_of(tree: ast.Module) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_packages_import_in_one_direction() -> None:
    """No library module imports the CLI; review/ and team/ do not import each other."""
    wrong = []
    for rel, tree in sources():
        mods = imports_of(tree)
        if not rel.startswith("cli/") and rel != "__main__.py":
            wrong += [f"{rel} imports {m}" for m in mods if m.startswith("orchestrator.cli")]
        if rel.startswith("review/"):
            wrong += [f"{rel} imports {m}" for m in mods if m.startswith("orchestrator.team")]
        if rel.startswith("team/"):
            wrong += [f"{rel} imports {m}" for m in mods if m.startswith("orchestrator.review")]
    assert wrong == []


def test_every_backend_is_a_module_under_backends() -> None:
    """Each registry entry imports, is a `Backend` whose ``name`` is its own, and lives
    in `orchestrator.backends`; no backend class is defined anywhere else."""
    import importlib
    import inspect

    from orchestrator.backend_names import BACKENDS
    from orchestrator.backends import backend_module
    from orchestrator.protocols import Backend

    homes = set()
    for name, target in BACKENDS.items():
        module_name, _, attr = target.partition(":")
        assert module_name == backend_module(name)
        assert module_name.startswith("orchestrator.backends."), target
        cls = getattr(importlib.import_module(module_name), attr)
        assert inspect.isclass(cls) and cls.name == name, target
        # the `Backend` protocol: built as Class(config, layout), run(ctx) -> RunResult
        assert list(inspect.signature(cls).parameters) == ["config", "layout"], target
        assert list(inspect.signature(cls.run).parameters) == ["self", "ctx"], target
        assert isinstance(object.__new__(cls), Backend), target
        homes.add(Path(inspect.getfile(cls)).resolve())
    assert all(PACKAGE / "backends" in p.parents for p in homes)
    elsewhere = [f"{rel}:{node.lineno} defines {node.name}" for rel, tree in sources()
                 if not rel.startswith("backends/") for node in ast.walk(tree)
                 if isinstance(node, ast.ClassDef) and node.name.endswith("Backend")
                 and rel != "protocols.py"]
    assert elsewhere == []
