"""The verification command (``team.verify``, e.g. ``pytest -q``) run in a task's worktree.

Its output goes to the task log (kind ``verify_output``); the result is what
the task records in ``checks``. A non-zero exit, or running past
``team.verify_timeout``, fails the checks.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.model import CheckResult, utcnow
from orchestrator.process import run_streamed
from orchestrator.protocols import TaskLogger
from orchestrator.transcript import VerifyFinished, VerifyOutput, VerifyStarted

if TYPE_CHECKING:
    from orchestrator.sandbox import Sandbox

TAIL_CHARS = 2000


def run_checks(cmd: str, *, cwd: Path, env: Mapping[str, str], log: TaskLogger,
               timeout: float, stop: threading.Event | None = None,
               sandbox: Sandbox | None = None) -> CheckResult:
    """Run ``cmd`` (in ``sandbox``: the task's, with the agent's rules)."""
    log.write(VerifyStarted(command=cmd))
    res = run_streamed(cmd, cwd=cwd, env=env, log=log, output=VerifyOutput,
                       timeout=timeout, stop=stop, sandbox=sandbox)
    checks = CheckResult(command=cmd, passed=res.ok, exit_code=res.returncode,
                         result=res.describe(), seconds=round(res.seconds, 3),
                         output_tail=res.tail[-TAIL_CHARS:], at=utcnow(), stopped=res.stopped)
    log.write(VerifyFinished(passed=checks.passed, result=checks.result, seconds=checks.seconds))
    return checks
