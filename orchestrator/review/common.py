"""What every review operation starts from: the board (given or opened) and the repository."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.layout import Layout


@contextlib.contextmanager
def using_board(layout: Layout, config: Config, board: ControlPlane | None,
                actor: str) -> Iterator[ControlPlane]:
    """``board`` when the caller has one open (the MCP server, the lead), else a board
    opened for this call and closed after it."""
    if board is not None:
        yield board
        return
    from orchestrator.board import open_board

    opened = open_board(layout, config.board, actor=actor)
    try:
        yield opened
    finally:
        opened.close()
