"""Task budgets: dollars, tokens and wall-clock seconds a task may spend over all its runs.

    add --budget-usd 2 --budget-tokens 400000 --timeout 30m     (or the same in a dropped
                                                                 file: budget_usd, …)
    spending   ``task.usage``, summed from what each backend reports: the built-in loop per
               request, Claude Code from its stream, a command backend from its usage file
               (`read_usage_file`), the seconds of every run
    80 %       a ``budget_warning`` event (the ``[hooks] budget`` hooks run)
    100 %      the run stops at a step boundary, its work is committed to the task branch,
               and the task waits for a person (``failed`` with ``waiting_for`` saying
               "budget: $2.00 of $2.00 spent", event ``budget_reached``), until
               ``orchestrator resume ID --budget-usd 4`` (or ``--review``, or ``discard``)

The built-in loop checks before each request, so a budget is exceeded by at most the
request that crossed it.

``[budget]`` (`orchestrator.config.BudgetConfig`) adds shared limits: per plan (the tasks
one ``orchestrator plan`` wrote, summed from the board), per teammate per UTC day and for
the whole board per UTC day (summed from the ``spend`` event each run writes). A run counts
against each (`Limit`); the reason names the one reached ("budget: board today $50.00 of
$50.00 spent").
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from orchestrator.clock import utcnow
from orchestrator.errors import InvalidInput
from orchestrator.events import BudgetWarning, Spend
from orchestrator.model import Budget, InvalidRecord, Task, Usage
from orchestrator.record import convert

if TYPE_CHECKING:
    from orchestrator.config import BudgetConfig
    from orchestrator.controlplane import ControlPlane, Events
    from orchestrator.protocols import RunContext

WARN_FRACTION = 0.8
USAGE_FILE_ENV = "ORCH_USAGE_FILE"
"""Names the file a command backend may write its usage to (see `read_usage_file`)."""
MAX_USAGE_FILE_BYTES = 64 * 1024

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(h|m|s|ms)?", re.I)
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, None: 1.0}


def parse_duration(value: Any, what: str = "timeout") -> float:
    """Seconds from ``90``, ``"90"``, ``"90s"``, ``"30m"``, ``"1h30m"``; `InvalidInput` else."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidInput(f"{what}: expected a duration like 30m, 1h or 90s, not {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip().replace(" ", "")
        parts = list(_DURATION.finditer(text))
        if not text or not parts or "".join(p.group(0) for p in parts) != text:
            raise InvalidInput(f"{what}: expected a duration like 30m, 1h or 90s, "
                               f"not {value!r}")
        seconds = sum(float(p.group(1)) * _UNIT[(p.group(2) or "").lower() or None]
                      for p in parts)
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidInput(f"{what}: must be more than 0 seconds, not {value!r}")
    return seconds


def make_budget(usd: Any = None, tokens: Any = None, timeout: Any = None,
                base: Budget | None = None) -> Budget:
    """A validated `Budget` from what a person or a file wrote (``base`` for the rest)."""
    data = msgspec.to_builtins(base or Budget())
    if usd is not None:
        data["usd"] = _number(usd, "budget_usd")
    if tokens is not None:
        n = _number(tokens, "budget_tokens")
        if n != int(n):
            raise InvalidInput(f"budget_tokens: a whole number of tokens, not {tokens!r}")
        data["tokens"] = int(n)
    if timeout is not None:
        data["seconds"] = parse_duration(timeout)
    try:
        return convert(data, Budget)
    except InvalidRecord as exc:
        from orchestrator.record import describe_error

        where, _, msg = describe_error(exc).partition(": ")
        field = {"usd": "budget_usd", "tokens": "budget_tokens", "seconds": "timeout"}.get(
            where, where)
        raise InvalidInput(f"{field}: {msg}") from exc


def _number(value: Any, what: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip().lstrip("$"))
        except ValueError:
            raise InvalidInput(f"{what}: not a number: {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"{what}: not a number: {value!r}")
    return float(value)


class Limit(msgspec.Struct, frozen=True):
    """One budget a run counts against: the task's own (``label`` empty), its plan's, its
    teammate's today, the board's today; ``spent`` is what was spent before the run."""

    label: str
    budget: Budget
    spent: Usage

    def reached(self, run: Usage) -> str | None:
        """The reason, when what was spent before plus ``run`` reaches the budget."""
        why = reached(self.budget, self.spent.add(run))
        return why.replace("budget:", f"budget: {self.label}", 1) if why and self.label \
            else why


def limits_for(task: Task, teammate: str, config: BudgetConfig,
               board: ControlPlane) -> list[Limit]:
    """Every budget a run of ``task`` by ``teammate`` counts against (``[budget]``)."""
    out = [Limit("", task.budget, task.usage)]
    plan = plan_of(task)
    if plan and (config.plan_usd or config.plan_tokens):
        spent = Usage()
        for t in board.list():
            if plan_of(t) == plan:
                spent = spent.add(t.usage)
        out.append(Limit(f"plan {plan}", Budget(usd=config.plan_usd,
                                                tokens=config.plan_tokens), spent))
    mate = config.teammate_daily_usd or config.teammate_daily_tokens
    if mate or config.daily_usd or config.daily_tokens:
        everyone, mine = spent_today(board.events)
        if mate:
            out.append(Limit(f"{teammate} today", Budget(
                usd=config.teammate_daily_usd, tokens=config.teammate_daily_tokens),
                mine.get(teammate, Usage())))
        if config.daily_usd or config.daily_tokens:
            out.append(Limit("board today", Budget(usd=config.daily_usd,
                                                   tokens=config.daily_tokens), everyone))
    return out


def run_limits(ctx: RunContext) -> list[Limit]:
    """The budgets a run counts against: what the teammate worked out (`limits_for`, in
    ``ctx.limits``), else the task's own."""
    if ctx.limits is not None:
        return ctx.limits
    return [Limit("", ctx.task.budget, ctx.task.usage)]


def plan_of(task: Task) -> str | None:
    """The plan a task belongs to (``metadata.plan.id``, written by ``orchestrator plan``)."""
    plan = task.metadata.get("plan")
    pid = plan.get("id") if isinstance(plan, dict) else None
    return pid if isinstance(pid, str) and pid else None


def spent_today(events: Events) -> tuple[Usage, dict[str, Usage]]:
    """The ``spend`` events of this UTC day: the board's total and each teammate's (read
    from the newest back, in growing chunks, until an event of an earlier day)."""
    today = utcnow()[:10]
    n = 1000
    while True:
        newest = events.tail(n)
        if len(newest) < n or str(newest[0].get("ts", ""))[:10] < today:
            break
        n *= 4
    total, by_mate = Usage(), dict[str, Usage]()
    for e in reversed(newest):
        if str(e.get("ts", ""))[:10] < today:
            break
        spend = e.decode()
        if isinstance(spend, Spend):
            total = total.add(spend.usage)
            by_mate[e.actor] = by_mate.get(e.actor, Usage()).add(spend.usage)
    return total, by_mate


def warn(limits: list[Limit], before: Usage, after: Usage, events: Events, task_id: str,
         actor: str) -> None:
    """A ``budget_warning`` event for each limit a run's spending (``before`` -> ``after``)
    took past 80 % (``budget_reached`` is written when the task stops)."""
    for limit in limits:
        if "budget_warning" in crossed(limit.budget, limit.spent.add(before),
                                       limit.spent.add(after)):
            events.emit(BudgetWarning(limit=limit.label or "task",
                                      spent=describe(limit.budget, limit.spent.add(after))),
                        task_id, actor=actor)


def minus(a: Usage, b: Usage) -> Usage:
    """``a - b`` field by field, never below 0."""
    return convert({k: max(0, v - getattr(b, k)) for k, v in msgspec.to_builtins(a).items()},
                   Usage)


def first_reached(limits: list[Limit], run: Usage) -> str | None:
    return next((why for limit in limits if (why := limit.reached(run))), None)


def fraction(budget: Budget, usage: Usage) -> float:
    """How much of the tightest limit is spent (0 with no limits)."""
    parts = [usage.cost_usd / budget.usd if budget.usd else 0.0,
             usage.tokens / budget.tokens if budget.tokens else 0.0,
             usage.seconds / budget.seconds if budget.seconds else 0.0]
    return max(parts)


def reached(budget: Budget, usage: Usage) -> str | None:
    """The reason a task may not spend more ("budget: $2.00 of $2.00 spent"), or None."""
    if budget.usd is not None and usage.cost_usd >= budget.usd:
        return f"budget: {money(usage.cost_usd)} of {money(budget.usd)} spent"
    if budget.tokens is not None and usage.tokens >= budget.tokens:
        return f"budget: {usage.tokens} of {budget.tokens} tokens spent"
    if budget.seconds is not None and usage.seconds >= budget.seconds:
        return f"budget: {_duration(usage.seconds)} of {_duration(budget.seconds)} spent"
    return None


def remaining_seconds(budget: Budget, usage: Usage) -> float | None:
    return None if budget.seconds is None else max(0.0, budget.seconds - usage.seconds)


def crossed(budget: Budget, before: Usage, after: Usage) -> list[str]:
    """The events a change of spending from ``before`` to ``after`` calls for."""
    a, b = fraction(budget, before), fraction(budget, after)
    out = []
    if a < WARN_FRACTION <= b:
        out.append("budget_warning")
    if a < 1.0 <= b:
        out.append("budget_reached")
    return out


def money(usd: float) -> str:
    """Dollars as people write them: ``$1.50``, ``$1,234.00``; below a cent ``$0.0042``."""
    if 0 < abs(usd) < 0.01:
        return f"${usd:.4f}"
    return f"${usd:,.2f}"


def describe(budget: Budget, usage: Usage) -> str:
    """``$1.20/$2.00 310k/400k tok 4m/30m``: what ``list`` and ``review`` show."""
    parts = [money(usage.cost_usd) + (f"/{money(budget.usd)}" if budget.usd else "")]
    if budget.tokens:
        parts.append(f"{_k(usage.tokens)}/{_k(budget.tokens)} tok")
    if budget.seconds:
        parts.append(f"{_duration(usage.seconds)}/{_duration(budget.seconds)}")
    return " ".join(parts)


def read_usage_file(path: Path) -> Usage:
    """What a command backend reported in ``$ORCH_USAGE_FILE``: one JSON object with the run's
    totals (``input_tokens``, ``output_tokens``, ``cache_read_tokens``,
    ``cache_write_tokens``, ``cost_usd``; all optional, numbers ≥ 0), or JSON lines of such
    objects, one per request, which are added up. A missing file is no usage; a malformed
    one raises `InvalidInput` (the run's result says so, nothing is counted from it)."""
    from orchestrator.beneath import read_beneath

    try:  # the agent wrote it: a link, FIFO or device in its place is not followed or read
        raw = read_beneath(path.parent, path.name, MAX_USAGE_FILE_BYTES + 1)
    except FileNotFoundError:
        return Usage()
    except OSError as exc:
        raise InvalidInput(f"usage file {path}: {exc}") from exc
    if len(raw) > MAX_USAGE_FILE_BYTES:
        raise InvalidInput(f"usage file {path} is larger than {MAX_USAGE_FILE_BYTES} bytes")
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return Usage()
    try:
        records = [json.loads(text)] if text.startswith("{") and "\n" not in text else [
            json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"usage file {path}: not JSON: {exc}") from exc
    total = Usage()
    for rec in records:
        total = total.add(_usage_record(rec, path))
    return total


def _usage_record(rec: Any, path: Path) -> Usage:
    if not isinstance(rec, dict):
        raise InvalidInput(f"usage file {path}: expected JSON objects")
    fields = {k: rec.get(k, 0) for k in ("input_tokens", "output_tokens", "cache_read_tokens",
                                           "cache_write_tokens", "cost_usd")}
    for key, value in fields.items():
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value) or value < 0 or value > 1e12:
            raise InvalidInput(f"usage file {path}: {key} must be a number >= 0, not {value!r}")
        if key != "cost_usd" and value != int(value):
            raise InvalidInput(f"usage file {path}: {key} must be a whole number")
    return convert({k: (float(v) if k == "cost_usd" else int(v)) for k, v in fields.items()},
                   Usage)


def _duration(seconds: float) -> str:
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s" if s % 60 else f"{s // 60}m"
    return f"{s}s"


def _k(n: int) -> str:
    return f"{n / 1000:.0f}k" if n >= 10_000 else str(n)
