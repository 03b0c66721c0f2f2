"""No going round in circles: what the agent loop (and the Claude Code backend) watch for.

Three named reasons, each with its own threshold (``[agent]`` settings, 0 turns one off):

    repeated_call   the same tool call, same arguments, same result, N times in the run
                    (``agent.no_progress_repeats``, default 3)
    same_failure    the same failing tool output K times in a row, whatever the command
                    (``agent.no_progress_failures``, default 3): a test suite failing the
                    same way after each "fix"
    idle_turns      turns that add nothing: no new tool call (every call a repeat with the
                    same result, or none) and no new text (``agent.no_progress_turns``,
                    default 3)

The first time a reason is met the agent is told once (a note after the tool results:
"you have run the same command three times with the same result; change approach or
stop"); met again, the run stops with `NoProgress` and the task waits for a person, as
when a budget is spent (`orchestrator.budget`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from orchestrator.agent.base import LoopSignal

WORDS = {2: "twice", 3: "three times", 4: "four times", 5: "five times"}


class NoProgress(LoopSignal):
    """The agent went on after being told it makes no progress; ``reason`` is its name."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"no progress: {detail}")
        self.reason = reason


@dataclass
class Call:
    """One tool call of a turn and what it returned."""

    name: str
    args: dict[str, Any]
    result: Any
    """The tool result's content (text, or content blocks)."""
    is_error: bool

    @property
    def key(self) -> str:
        return json.dumps([self.name, self.args, self.result], sort_keys=True, default=str)


@dataclass
class ProgressWatch:
    repeats: int = 3
    failures: int = 3
    idle_turns: int = 3
    seen: Counter[str] = field(default_factory=Counter)
    texts: set[str] = field(default_factory=set)
    failure: tuple[str, int] = ("", 0)
    """The last failing output and how many times in a row it came."""
    idle: int = 0
    warned: set[str] = field(default_factory=set)

    def turn(self, text: str, calls: list[Call]) -> str | None:
        """Account one turn; the note to tell the agent, None, or `NoProgress`."""
        new_text = bool(text.strip()) and text.strip() not in self.texts
        self.texts.add(text.strip())
        new_call = False
        found: list[tuple[str, str]] = []
        for c in calls:
            self.seen[c.key] += 1
            n = self.seen[c.key]
            new_call = new_call or n == 1
            if self.repeats and n >= self.repeats:
                found.append(("repeated_call", f"you have run the same {c.name} call "
                              f"{_times(n)} with the same result"))
            last, count = self.failure
            self.failure = (c.result, count + 1 if c.result == last else 1) if c.is_error \
                else ("", 0)
            if self.failures and self.failure[1] >= self.failures:
                found.append(("same_failure", f"the same failure came back "
                              f"{_times(self.failure[1])} in a row"))
        self.idle = 0 if new_text or new_call else self.idle + 1
        if self.idle_turns and self.idle >= self.idle_turns:
            found.append(("idle_turns", f"your last {_times(self.idle, plain=True)} turns "
                          "added nothing new"))
        for reason, detail in found:
            if reason in self.warned:
                raise NoProgress(reason, detail)
        notes = []
        for reason, detail in found:
            self.warned.add(reason)
            notes.append(detail)
        if not notes:
            return None
        return f"Note: {'; '.join(dict.fromkeys(notes))}. Change approach, or stop and say " \
               "what blocks you."


def _times(n: int, *, plain: bool = False) -> str:
    if plain:
        return str(n)
    return WORDS.get(n, f"{n} times")
