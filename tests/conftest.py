"""Test hygiene for the whole suite.

- warnings are errors and every test has a timeout (pyproject.toml);
- a clean environment: no real API keys, no ORCH_* settings from the shell,
  a fixed git identity, HOME in a temp folder;
- no leaked threads and no leaked child processes after a test.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import child_pids, cmdline, make_repo
from tests.pg import (  # noqa: F401  (fixtures: a real PostgreSQL)
    pg_board_url,
    pg_cluster,
    pg_template,
    pg_url,
)

# Real model calls are impossible in tests: nothing points at a real API.
for _var in list(os.environ):
    if _var.startswith(("ANTHROPIC_", "ORCH_", "CLAUDE_", "GIT_")):
        del os.environ[_var]
os.environ["ANTHROPIC_BASE_URL"] = "http://127.0.0.1:9"  # discard port: fails fast, never leaves
os.environ.update(
    GIT_AUTHOR_NAME="Test", GIT_AUTHOR_EMAIL="test@example.com",
    GIT_COMMITTER_NAME="Test", GIT_COMMITTER_EMAIL="test@example.com",
    GIT_CONFIG_NOSYSTEM="1",
)

LEAK_GRACE_SECONDS = 5.0


@pytest.fixture(autouse=True)
def _clean_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("home")
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test\n\temail = test@example.com\n"
        "[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n"
    )
    monkeypatch.setenv("HOME", str(home))


@pytest.fixture(autouse=True)
def _no_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    # A module may name threads (by name prefix) and processes (by command-line prefix)
    # that live as long as one of its module-scoped fixtures: LEAK_OK_THREADS and
    # LEAK_OK_PROCESSES (a browser's executor threads and renderer processes).
    allowed = tuple(getattr(request.module, "LEAK_OK_THREADS", ()))
    allowed_procs = tuple(getattr(request.module, "LEAK_OK_PROCESSES", ()))
    threads_before = set(threading.enumerate())
    kids_before = set(child_pids())
    yield
    deadline = time.monotonic() + LEAK_GRACE_SECONDS
    while True:
        threads = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()
                   and not (allowed and t.name.startswith(allowed))]
        kids = [p for p in child_pids() if p not in kids_before
                and not (allowed_procs and cmdline(p).startswith(allowed_procs))]
        if not threads and not kids:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    msg = []
    if threads:
        msg.append(f"leaked threads: {[t.name for t in threads]}")
    if kids:
        msg.append(f"leaked processes: {[(p, cmdline(p)) for p in kids]}")
    pytest.fail("; ".join(msg))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A real git repository with one commit, as a user would run orchestrator in."""
    return make_repo(tmp_path / "repo")


@pytest.fixture(scope="session")
def validator(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """GitHub's OpenAPI description, pruned once per session: checks every exchange of the
    forge stand-in (`tests.forge_support`, which skips without the forge extra)."""
    from tests.forge_support import load_validator

    return load_validator(tmp_path_factory.mktemp("openapi"))


@pytest.fixture
def gh(repo: Path, validator: Any) -> Iterator[Any]:
    """The GitHub stand-in over a bare clone of ``repo`` (`tests.forge_support.standin`)."""
    from tests.forge_support import standin

    with standin(repo, validator) as s:
        yield s
