"""The one front-matter parser (`orchestrator.frontmatter`): dropped Markdown tasks and
agent profiles read the same lines the same way, and hostile front matter is one clear
line, quickly."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator import frontmatter
from orchestrator.board import init_repo, open_board
from orchestrator.errors import InvalidInput
from orchestrator.profiles import parse_agent_file

HEAD = """---
description: fixes #123 and #7  # the '# ' starts a comment, '#123' does not
tools:
  - Read
  - "Grep"
model: 'it''s'
---
"""


def test_both_faces_read_the_same_front_matter(repo: Path) -> None:
    profile = parse_agent_file(HEAD + "Body\n", "a.md")
    assert profile["description"] == "fixes #123 and #7"
    assert profile["tools"] == ["Read", "Grep"] and profile["model"] == "it's"
    layout = init_repo(repo)
    (layout.inbox / "t.md").write_text(HEAD + "# Fix the login\n\nIt 500s.\n")
    with open_board(layout) as board:
        [task] = board.intake()
    assert task.subject == "Fix the login" and task.description == "fixes #123 and #7"
    assert task.metadata == {"tools": ["Read", "Grep"], "model": "it's"}


def test_a_value_with_a_hash_is_kept(repo: Path) -> None:
    layout = init_repo(repo)
    (layout.inbox / "t.md").write_text("---\nsubject: fix #123\n---\nbody\n")
    with open_board(layout) as board:
        [task] = board.intake()
    assert (task.subject, task.description) == ("fix #123", "body")


@pytest.mark.parametrize(("lines", "message"), [
    (["blocks: " + "[" * 5000 + "]" * 5000], "line 2: a list inside a list"),
    (["a: [1, 2", "b: 3"], "line 2: a list must close on the same line"),
    (["a: 1", "no colon here"], "line 3: expected 'key: value', got 'no colon here'"),
    (['a: "\\x"'], "line 2: bad quoted string"),
])
def test_bad_front_matter_is_one_line(lines: list[str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as caught:
        frontmatter.parse(lines)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 200


def test_hostile_values_stay_data_and_take_no_time() -> None:
    spaces = "a" + " " * 300_000 + "b"
    digits = "9" * 5000  # past Python's limit for int(): kept as text
    started = time.monotonic()
    data = frontmatter.parse([f"x: {spaces}", f"n: {digits}", "y: *alias", "z: &anchor {a: 1}"])
    assert time.monotonic() - started < 1
    assert data == {"x": spaces, "n": digits, "y": "*alias", "z": "&anchor {a: 1}"}


@pytest.mark.parametrize("item", ["  - a", "  more words"])
def test_a_huge_block_list_or_folded_value_takes_no_time(item: str) -> None:
    """A dropped file may be 768 KiB of list items or continuation lines: one pass (a list
    copied for each item took 6 s at 100,000 items, ~20 s at the size limit)."""
    lines = ["x:", *[item] * 190_000]
    started = time.monotonic()
    data = frontmatter.parse(lines)
    assert time.monotonic() - started < 1.5
    assert data["x"] == ["a"] * 190_000 if "-" in item else \
        data["x"] == " ".join(["more words"] * 190_000)
