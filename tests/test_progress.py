"""No going round in circles (issue 20, part 2): the loop tells the agent once, then stops.

The built-in loop on the loopback Messages API with a model that repeats the same call
forever; then each named reason of `ProgressWatch` on its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.progress import Call, NoProgress, ProgressWatch
from orchestrator.config import Config
from orchestrator.model import Budget
from tests.loopback import LoopbackAPI, Reply, tool_use
from tests.test_backend_agent import ClaimFn, api, claim  # noqa: F401 (fixtures)
from tests.test_claude_code_support import ClaudeScript, claude_binary, claude_env, read, said

MODEL = {"model": "claude-sonnet-4-6"}


def test_an_agent_repeating_the_same_call_forever_is_told_once_then_stopped(
        claim: ClaimFn, api: LoopbackAPI) -> None:  # noqa: F811
    c = claim(agent=MODEL, budget=Budget(usd=5.0))
    api.responder = lambda body: Reply([tool_use("read", {"file_path": "missing.txt"})],
                                       "tool_use")
    result = c.run("anthropic")
    # N = 3: told after the third call, stopped after the fourth: N + 1 requests
    assert len(api.requests) == 4
    assert not result.ok and result.paused is not None
    assert result.paused.startswith("no progress: you have run the same read call four times")
    told = api.requests[3]["messages"][-1]["content"]
    assert told[-1]["type"] == "text" and "three times with the same result" in told[-1]["text"]
    assert "Change approach, or stop" in told[-1]["text"]
    assert [m["content"][-1].get("type") for m in api.requests[2]["messages"][2::2]] == [
        "tool_result", "tool_result"]  # not told before the third
    spent = c.board.get(c.task.id).usage.cost_usd
    assert 0 < spent < 5.0
    assert c.log("no_progress_warning") and c.log("paused")[0]["reason"] == result.paused


def calls(*specs: tuple[str, Any, str, bool]) -> list[Call]:
    return [Call(name, {"a": args}, result, err) for name, args, result, err in specs]


def test_same_failure_in_a_row_whatever_the_command() -> None:
    w = ProgressWatch(repeats=0, failures=3, idle_turns=0)
    assert w.turn("try 1", calls(("bash", 1, "FAILED test_x", True))) is None
    assert w.turn("try 2", calls(("bash", 2, "FAILED test_x", True))) is None
    note = w.turn("try 3", calls(("bash", 3, "FAILED test_x", True)))
    assert note is not None and "the same failure came back three times in a row" in note
    with pytest.raises(NoProgress) as exc:
        w.turn("try 4", calls(("bash", 4, "FAILED test_x", True)))
    assert exc.value.reason == "same_failure"


def test_a_success_or_another_failure_breaks_the_run_of_failures() -> None:
    w = ProgressWatch(repeats=0, failures=2, idle_turns=0)
    assert w.turn("a", calls(("bash", 1, "boom", True))) is None
    assert w.turn("b", calls(("bash", 2, "ok", False))) is None
    assert w.turn("c", calls(("bash", 3, "boom", True))) is None
    assert w.turn("d", calls(("bash", 4, "bang", True))) is None
    assert w.turn("e", calls(("bash", 5, "bang", True))) is not None


def test_turns_that_add_nothing() -> None:
    w = ProgressWatch(repeats=0, failures=0, idle_turns=2)
    same = ("read", "f.py", "content", False)
    assert w.turn("reading", calls(same)) is None       # new call
    assert w.turn("reading", calls(same)) is None       # idle 1: same text, same call
    note = w.turn("", calls(same))                      # idle 2
    assert note is not None and "your last 2 turns added nothing new" in note
    with pytest.raises(NoProgress) as exc:
        w.turn("reading", calls(same))
    assert exc.value.reason == "idle_turns"


def test_new_work_between_repeats_still_counts_the_repeats_and_zero_turns_it_off() -> None:
    w = ProgressWatch(repeats=3, failures=0, idle_turns=0)
    ls = ("ls", ".", "a b", False)
    for i in range(2):
        assert w.turn(f"step {i}", calls(ls, ("write", i, "ok", False))) is None
    assert w.turn("again", calls(ls)) is not None
    off = ProgressWatch(0, 0, 0)
    for _ in range(10):
        assert off.turn("", calls(ls)) is None


def test_claude_code_going_round_in_circles_is_told_once_then_stopped(
        repo: Path, claim: ClaimFn, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from orchestrator.backends.claude_code import ClaudeCodeBackend

    c = claim(subject="Read the missing file")
    config = Config.load(repo, environ={}, overrides={
        "claude_code": {"binary": str(claude_binary())}})
    with LoopbackAPI() as server:
        cc = ClaudeScript(server, lambda wt: [read(wt / "missing.txt")] * 40 + ["Done."])
        for k, v in claude_env(server).items():
            monkeypatch.setenv(k, v)
        result = ClaudeCodeBackend(config, c.layout).run(c.ctx())
    assert not result.ok and result.paused is not None, result.error
    assert result.paused.startswith("no progress: "), result.paused
    conversation = cc.conversations()
    # told once, in the same session (the note is the prompt of a resumed run) ...
    assert said(conversation, "Change approach, or stop")
    # ... and stopped before the script ran out (how many reads Claude Code made before it
    # was killed depends on the machine's speed: the loopback answers at once)
    reads = sum(1 for r in conversation[-1:] for m in r["messages"] if m["role"] == "assistant")
    assert reads < 40, reads
    assert result.session_id and not cc.problems
