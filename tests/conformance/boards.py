"""The board implementations the conformance suite runs against, and how a test (or a
worker process it starts) opens one.

A `Spec` says which implementation and where; it is plain JSON so that worker
processes (`tests.conformance.worker`) open the very same board. Adding an
implementation is one entry in `IMPLEMENTATIONS` plus a branch in `make_spec` and
`open_spec`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.board import init_repo, open_board
from orchestrator.config import BoardConfig
from orchestrator.controlplane import ControlPlane
from orchestrator.layout import Layout

IMPLEMENTATIONS = ["file", "postgresql"]
"""pytest parameter ids of the board fixture."""

Spec = dict[str, Any]


def make_spec(kind: str, tmp_path: Path, repo: Path, url: str | None = None,
              **board: Any) -> Spec:
    """A fresh, empty board of ``kind`` for one test (``url``: the PostgreSQL database,
    already migrated)."""
    if kind == "file":
        init_repo(repo)
        return {"kind": "file", "root": str(repo), "board": board}
    if kind == "postgresql":
        init_repo(repo)
        return {"kind": "postgresql", "root": str(repo), "board": {**board, "url": url}}
    raise ValueError(f"unknown board implementation {kind!r}")


def open_spec(spec: Spec, actor: str = "test") -> ControlPlane:
    config = BoardConfig(**spec.get("board", {}))
    if spec["kind"] in ("file", "postgresql"):
        return open_board(Layout.at(spec["root"]), config, actor=actor)
    raise ValueError(f"unknown board implementation {spec['kind']!r}")


def dumps(spec: Spec) -> str:
    return json.dumps(spec)
