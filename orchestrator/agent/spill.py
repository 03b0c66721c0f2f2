"""Large tool results: the full text goes to a file, the model gets a preview.

A result longer than the cap is written to the run's spill folder and replaced
by its head and tail plus the file's path, which the ``read`` and ``grep``
tools may open (the spill folder is readable to read-only tools).
"""

from __future__ import annotations

import uuid
from pathlib import Path

RESULT_CAP_CHARS = 30_000
"""Results longer than this are spilled."""
PREVIEW_CHARS = 4_000
"""Head plus tail of a spilled result that the model sees."""


def cut_middle(text: str, head: int, tail: int, *, unit: str = "chars") -> str:
    """``text`` with its middle cut out when longer than ``head + tail``, saying how much."""
    if len(text) <= head + tail:
        return text
    cut = len(text) - head - tail
    end = text[-tail:] if tail else ""
    return f"{text[:head]}\n\n[... {cut} {unit} cut ...]\n\n{end}"


def spill(text: str, spill_dir: Path | None, label: str, *,
          cap: int = RESULT_CAP_CHARS, preview: int = PREVIEW_CHARS) -> str:
    """``text`` itself when short; else a preview and the path of the file holding all of it.

    Without a spill folder the middle is cut instead (nothing is written).
    """
    if len(text) <= cap:
        return text
    half = preview // 2
    if spill_dir is None:
        return cut_middle(text, half, half)
    spill_dir.mkdir(parents=True, exist_ok=True)
    path = spill_dir / f"{label}-{uuid.uuid4().hex[:8]}.txt"
    path.write_text(text, encoding="utf-8")
    lines = text.count("\n") + 1
    return (
        f"[result too large: {len(text)} chars, {lines} lines; the full text is in {path}; "
        "open parts of it with read (offset/limit) or search it with grep]\n\n"
        + cut_middle(text, half, half)
    )
