"""Issue 16, also found: a symlink an agent made that points outside its worktree is
committed (git stores only its target text), and `review` warns about it."""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.review import review_rows
from tests.helpers import git
from tests.test_review import in_process, keep


def test_links_out_of_the_worktree_are_warned_about_on_review(repo: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    t = keep(repo, "links", {"docs/readme.txt": "inside\n"})
    wt = Path(t.worktree or "")
    os.symlink("/etc", wt / "etc")
    os.symlink("../../../outside", wt / "docs" / "up")
    os.symlink("readme.txt", wt / "docs" / "fine")
    os.symlink("docs/../docs/readme.txt", wt / "also-fine")
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "links")
    [row] = review_rows(Layout.at(repo), Config.load(repo))
    assert row["warnings"] == [
        "symlink docs/up -> ../../../outside points outside the worktree",
        "symlink etc -> /etc points outside the worktree"]
    res = in_process(capsys)(repo, "review")
    assert res.returncode == 0
    assert f"! {t.id}: symlink etc -> /etc points outside the worktree" in res.stdout
