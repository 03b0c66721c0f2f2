"""The file board's teammate status: ``.tasks/.run/teammates/<name>.json``.

Each teammate writes its own file (atomically: readers see the old or the new state,
never half). `FileTeamStatus` implements `orchestrator.controlplane.TeamStatus`.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from orchestrator.board.mailboxes import check_name
from orchestrator.clock import utcnow
from orchestrator.controlplane import TeammateState
from orchestrator.fsutil import atomic_write
from orchestrator.layout import Layout


class FileTeamStatus:
    def __init__(self, layout: Layout) -> None:
        self.dir = layout.run / "teammates"

    def _path(self, name: str) -> Path:
        return self.dir / f"{check_name(name)}.json"

    def publish(self, name: str, state: str, **fields: Any) -> TeammateState:
        st = TeammateState.from_dict({**fields, "name": name, "state": state,
                                      "updated_at": utcnow()})
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self._path(name), json.dumps(st.to_dict(), indent=1), durable=False)
        return st

    def get(self, name: str) -> TeammateState | None:
        try:
            data = json.loads(self._path(name).read_text())
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            return None
        return TeammateState.from_dict(data) if isinstance(data, dict) else None

    def all(self) -> list[TeammateState]:
        if not self.dir.is_dir():
            return []
        out = []
        for f in sorted(self.dir.glob("*.json")):
            with contextlib.suppress(Exception):  # a stray file with a bad name
                st = self.get(f.stem)
                if st is not None:
                    out.append(st)
        return out

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(name).unlink()
