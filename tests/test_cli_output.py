"""What the board commands print: a closed pipe ends them quietly, and what a subject holds
never reaches the terminal raw."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_a_closed_pipe_ends_a_list_quietly(repo: Path) -> None:
    for i in range(300):
        (repo / ".tasks" / "inbox").mkdir(parents=True, exist_ok=True)
        (repo / ".tasks" / "inbox" / f"t{i}.md").write_text(f"task number {i}\n")
    p = subprocess.run(f"'{sys.executable}' -m orchestrator list | head -c 10 >/dev/null; "
                       f"'{sys.executable}' -m orchestrator list --json | head -c 10",
                       shell=True, capture_output=True, text=True, cwd=repo, timeout=120)
    assert "Traceback" not in p.stderr and "Exception" not in p.stderr, p.stderr
    assert p.stdout == '[{"id":"ta'


def test_control_characters_from_a_subject_never_reach_the_terminal_raw(repo: Path) -> None:
    """A subject (typed, or from a dropped file an agent wrote) with a terminal escape,
    an OSC clipboard sequence, a bell and a C1 control (and a description with a carriage
    return and a cursor move): list (piped and on a terminal), show and events print them
    written out, never raw."""
    from tests.helpers import run_on_terminal

    hostile = "fix \x1b]52;c;cHduZWQ=\x07 \x1b[2J gone \x9b31m \u202eend"

    def orch(*args: str) -> str:
        p = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True,
                           text=True, cwd=repo, timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout + p.stderr

    orch("add", hostile, "-d", "first\rover\x1b[1Aup\nsecond line")
    inbox = repo / ".tasks" / "inbox"
    inbox.mkdir(parents=True, exist_ok=True)
    (inbox / "agent.json").write_text(json.dumps({"title": "dropped \x1b[8mhidden\x1b[0m"}))
    stopped_id = json.loads(orch("add", "stopped", "--json"))["id"]  # edited by hand:
    stopped = repo / ".tasks" / f"{stopped_id}.json"  # a hostile reason to wait
    stopped.write_text(json.dumps({**json.loads(stopped.read_text()), "status": "failed",
                                   "waiting_for": "no progress: \x1b]0;t\x07"}))
    written = "fix \\x1b]52;c;cHduZWQ=\\x07 \\x1b[2J gone \\x9b31m \\u202eend"
    outputs = {"list": orch("list"), "show": orch("show", "1"), "events": orch("events"),
               "terminal": run_on_terminal(repo, ["list", "--status", "pending"],
                                           env={"PAGER": "cat"}),
               "failed": run_on_terminal(repo, ["list", "--status", "failed"],
                                         env={"PAGER": "cat"}),
               "waiting": orch("show", stopped_id)}
    for name, out in outputs.items():
        assert "\x07" not in out and "\x9b" not in out and "\r" not in out.replace("\r\n", ""), name
        assert "\x1b]" not in out and "\x1b[2J" not in out and "\x1b[8m" not in out, name
        assert "\u202e" not in out, name  # a bidi override: shown, never obeyed
    for name in ("list", "show", "events", "terminal"):
        assert written in outputs[name], (name, outputs[name])
    assert "dropped \\x1b[8mhidden\\x1b[0m" in outputs["list"]
    assert "(waiting: no progress)" in outputs["failed"]
    assert "no progress: \\x1b]0;t\\x07" in outputs["waiting"]  # the waiting reason
    assert "first\\x0dover\\x1b[1Aup\nsecond line" in outputs["show"]
    assert json.loads(orch("show", "1", "--json"))["subject"] == hostile  # the data is kept
