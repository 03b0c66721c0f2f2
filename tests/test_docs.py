"""The docs/ folder: the configuration reference is generated and up to date, and the
pages link to files and settings that exist."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from orchestrator.events import KINDS
from orchestrator.settings.registry import Registry
from orchestrator.transcript import Entry
from scripts import gen_config_docs, gen_event_docs

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_configuration_reference_is_generated_from_the_registry_and_up_to_date() -> None:
    text = gen_config_docs.render()
    assert (DOCS / "configuration.md").read_text() == text, \
        "docs/configuration.md is out of date: run scripts/gen_config_docs.py"
    for s in Registry():
        assert f"`{s.key}`" in text


def test_pages_link_to_pages_that_exist_and_name_real_settings() -> None:
    keys = {s.key for s in Registry()}
    for page in DOCS.glob("*.md"):
        text = page.read_text()
        for link in re.findall(r"\]\(([^)#]+\.md)\)", text):
            assert (DOCS / link).exists(), f"{page.name} links to missing {link}"
        if page.name == "configuration.md":
            continue
        for key in re.findall(r"`((?:board|team|agent|worktree|mcp|hooks|claude_code|"
                              r"commands)\.[a-z_]+)", text):
            assert key in keys, f"{page.name} names an unknown setting {key}"


def test_the_event_list_is_generated_from_the_kinds_and_up_to_date() -> None:
    text = gen_event_docs.render()
    assert (DOCS / "events.md").read_text() == text, \
        "docs/events.md is out of date: run scripts/gen_event_docs.py"
    for kind in KINDS:
        assert f"| `{kind.__struct_config__.tag}` |" in text


def test_the_task_log_kinds_are_generated_from_the_code_and_up_to_date() -> None:
    text = gen_event_docs.render_log()
    assert (DOCS / "transcript.md").read_text() == text, \
        "docs/transcript.md is out of date: run scripts/gen_event_docs.py"
    for kind in get_args(Entry):
        assert f"| `{kind.__struct_config__.tag}` |" in text and kind.__doc__
