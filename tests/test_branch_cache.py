"""The review cache under many processes at once (`orchestrator.branches.cache`): several
teammates fill it as their tasks reach review while ``review`` reads it."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.branches.cache import FILE, PairCache

FILL_SCRIPT = """
import json, sys
from pathlib import Path
from orchestrator.branches.cache import PairCache
git_dir, me, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()  # start together
problems = []
for r in range(rounds):  # a cache per round, as each teammate's warm-up and review open one
    with PairCache(git_dir) as cache:
        for i in range(10):
            cache.put("facts", f"{me}.{r}", str(i), json.dumps([me, r, i]))
        cache.save()
        if cache.problem:
            problems.append(cache.problem)
print(json.dumps(problems))
"""
FILLERS = 6
ROUNDS = 20


def fill_at_once(git_dir: Path) -> None:
    """`FILLERS` processes, started together, each saving `ROUNDS` answers of its own."""
    procs = [subprocess.Popen([sys.executable, "-c", FILL_SCRIPT, str(git_dir), f"p{i}",
                               str(ROUNDS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for i in range(FILLERS)]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    problems = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert [p.returncode for p in procs] == [0] * FILLERS
    assert problems == [[]] * FILLERS


def kept_answers(git_dir: Path) -> dict[tuple[str, str], list[object]]:
    db = sqlite3.connect(git_dir / "orchestrator" / FILE)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return {(a, b): json.loads(v) for a, b, v in db.execute("SELECT * FROM facts")}
    finally:
        db.close()


@pytest.mark.parametrize("start", ["no file", "no database", "an older schema"])
def test_concurrent_fillers_lose_no_answer(tmp_path: Path, start: str) -> None:
    """Whoever comes first makes the tables (or makes a broken file afresh) and nobody drops
    another's rows or gives up on a lock; three runs, as the race is in the first writes."""
    for run in range(3):
        git_dir = tmp_path / f"run{run}"
        (git_dir / "orchestrator").mkdir(parents=True)
        path = git_dir / "orchestrator" / FILE
        if start == "no database":
            path.write_bytes(b"torn or overwritten, no database\n" * 1000)
        elif start == "an older schema":
            db = sqlite3.connect(path)
            db.executescript("CREATE TABLE facts (x); PRAGMA user_version = 2;")
            db.close()
        fill_at_once(git_dir)
        assert kept_answers(git_dir) == {
            (f"p{p}.{r}", str(i)): [f"p{p}", r, i]
            for p in range(FILLERS) for r in range(ROUNDS) for i in range(10)}


def test_a_cache_that_cannot_be_opened_says_why_and_keeps_answers_for_the_call(
        tmp_path: Path) -> None:
    (tmp_path / "orchestrator" / FILE).mkdir(parents=True)  # in the file's place
    with PairCache(tmp_path) as cache:
        assert cache.db is None and cache.problem and "unable to open" in cache.problem
        cache.put("forks", "tip", "base", '"fork"')
        cache.save()
        assert cache.get_many("forks", [("tip", "base")]) == {("tip", "base"): '"fork"'}
