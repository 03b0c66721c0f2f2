"""ScriptedModel: the script format and its loud failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.agent.scripted import ScriptedModel, ScriptError, load_script, parse_step
from orchestrator.errors import InvalidInput
from orchestrator.model import Task


def play(model: ScriptedModel):  # type: ignore[no-untyped-def]
    return model.query(system=[], messages=[], tools=[], max_tokens=10)


def test_shorthands_become_messages_api_blocks() -> None:
    step = parse_step(["Looking.", {"tool": "read", "args": {"file_path": "a"}},
                       {"type": "tool_use", "name": "ls"}], 2)
    assert step.stop_reason == "tool_use"
    assert step.content == [
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "toolu_s003_2", "name": "read", "input": {"file_path": "a"}},
        {"type": "tool_use", "id": "toolu_s003_3", "input": {}, "name": "ls"},
    ]
    assert parse_step("bye", 0).stop_reason == "end_turn"
    special = parse_step({"content": ["cut"], "stop_reason": "max_tokens"}, 0)
    assert special.stop_reason == "max_tokens"


@pytest.mark.parametrize("bad", [[], 5, [7], [{"tool": "x", "args": []}], [{"type": "image"}]])
def test_malformed_steps_are_invalid_input(bad: object) -> None:
    with pytest.raises(InvalidInput, match="script step 1"):
        parse_step(bad, 0)


def test_extra_calls_and_unused_steps_fail_loudly() -> None:
    m = ScriptedModel([[{"tool": "ls", "args": {}}]])
    play(m)
    with pytest.raises(ScriptError, match="unexpected model call #2"):
        play(m)
    early = ScriptedModel(["done", "more"])
    with pytest.raises(ScriptError, match="1 later steps are unused"):
        play(early)
    idle = ScriptedModel([[{"tool": "ls"}], "done"])
    with pytest.raises(ScriptError, match="2 script steps unused"):
        idle.assert_done()


def test_script_sources(tmp_path: Path) -> None:
    inline = Task(id="task_001", subject="s", metadata={"script": ["done"]})
    assert load_script(inline, tmp_path) == ["done"]
    (tmp_path / "s.json").write_text(json.dumps({"steps": ["from file"]}))
    by_path = Task(id="task_001", subject="s", metadata={"script": "s.json"})
    assert load_script(by_path, tmp_path) == ["from file"]
    plain = Task(id="task_001", subject="s")
    assert load_script(plain, tmp_path, {"ORCH_SCRIPT": str(tmp_path / "s.json")}) == [
        "from file"]
    with pytest.raises(InvalidInput, match="needs a script"):
        load_script(plain, tmp_path, {})
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(InvalidInput, match="cannot read script"):
        load_script(Task(id="task_001", subject="s", metadata={"script": "bad.json"}), tmp_path)
    with pytest.raises(InvalidInput, match="list of steps"):
        load_script(Task(id="task_001", subject="s", metadata={"script": {"x": 1}}), tmp_path)
