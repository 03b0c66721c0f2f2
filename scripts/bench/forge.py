"""The forge loop against the GitHub stand-in: API requests per task, quiet-time requests,
and the time from a CI result to the agent's restart.

    .venv/bin/python scripts/bench/forge.py [--tasks 3] [--quiet 12]

A generated repository with a bare remote and `orchestrator.forge.standin` on loopback;
``orchestrator up -n 2`` with a command agent runs the whole loop for each of ``--tasks``
labelled issues: issue -> task -> pull request -> failing CI -> fixed -> changes requested
-> fixed -> merged on the forge -> merged here and cleaned up. The people and CI act
through the stand-in's REST API, like on GitHub.

- **Requests per task**: every request orchestrator's token sent to the stand-in through
  the whole loop, divided by the tasks; ``counted`` leaves out the 304s (conditional
  requests answered "not modified", which GitHub does not count against the rate limit).
  Goal: <= 30 counted per task.
- **Quiet**: after the loop, ``--quiet`` seconds with nothing changing; goal: no counted
  request (304s only).
- **CI result -> agent restart**: from the moment a failing check run is created on the
  stand-in to the task's next ``task_claimed`` event, once per task; with polling
  (``poll_seconds`` 4, the default) goal <= 5 s; with a signed webhook to ``orchestrator
  ui`` (polling at 120 s, so only the webhook can explain it) goal <= 1 s. The forge's own
  part (the check's creation to the task back in ``pending``) is shown beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from githubkit import GitHub

from orchestrator.board import open_board
from orchestrator.forge.standin import StandIn
from orchestrator.layout import Layout
from orchestrator.model import Status

BOT, PERSON = "ghp_bench_bot_000000000001", "ghp_bench_person_0000002"
AGENT = 'printf "%s\\n---\\n" "$ORCH_PROMPT" >> "notes-$ORCH_TASK_ID.md"'
GOAL_REQUESTS, GOAL_POLL, GOAL_HOOK = 30, 5.0, 1.0
SECRET = "bench-webhook-secret-0123456789"
ENV = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
       "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=ENV).stdout.strip()


def wait(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


def mark(ok: bool) -> str:
    return "✓" if ok else "✗"


class Run:
    def __init__(self, root: Path, *, webhook: bool) -> None:
        self.root, self.webhook = root, webhook
        self.repo = root / "repo"
        self.repo.mkdir(parents=True)
        git(self.repo, "init", "-q", "-b", "main")
        (self.repo / "README.md").write_text("bench\n")
        git(self.repo, "add", "README.md")
        git(self.repo, "commit", "-q", "-m", "init")
        git(root, "clone", "-q", "--bare", str(self.repo), str(root / "remote.git"))
        git(self.repo, "remote", "add", "origin", str(root / "remote.git"))
        git(self.repo, "fetch", "-q", "origin")
        (root / "token").write_text(BOT)
        (root / "secret").write_text(SECRET)
        self.gh = StandIn(root / "remote.git", "acme/app").start()
        self.gh.add_user("orch-bot", BOT, "write")
        self.gh.add_user("person", PERSON, "write")
        poll = 120 if webhook else 4
        (self.repo / "orchestrator.toml").write_text(
            f'[board]\nfsync = false\n[forge]\nkind = "github"\nrepo = "acme/app"\n'
            f'api_url = "{self.gh.url}"\ntoken_file = "{root / "token"}"\n'
            f"poll_seconds = {poll}\npoll_max_seconds = {max(poll, 60)}\n"
            f'webhook_secret_file = "{root / "secret"}"\n')
        self.person = GitHub(PERSON, base_url=self.gh.url + "/", http_cache=False,
                             auto_retry=False)
        self.procs: list[subprocess.Popen[str]] = []

    def start(self) -> None:
        if self.webhook:
            ui = subprocess.Popen([sys.executable, "-m", "orchestrator", "ui", "--port", "0"],
                                  cwd=self.repo, env=ENV, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
            self.procs.append(ui)
            assert ui.stdout is not None
            line, deadline = "", time.monotonic() + 30
            while "http://" not in line and time.monotonic() < deadline:
                if select.select([ui.stdout], [], [], 0.5)[0]:
                    line = ui.stdout.readline()
            url = line[line.index("http://"):].split()[0].split("?")[0].rstrip("/")
            self.gh.add_hook(url + "/forge/webhook", SECRET)
        self.procs.append(subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "up", "-n", "2", "--backend", "command",
             "--command", AGENT], cwd=self.repo, env=ENV, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, text=True))

    def stop(self) -> None:
        subprocess.run([sys.executable, "-m", "orchestrator", "down"], cwd=self.repo, env=ENV,
                       capture_output=True, check=False)
        for p in self.procs:
            if p.args[3] == "ui":  # type: ignore[index]
                p.send_signal(2)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.gh.stop()

    def events(self, name: str) -> list[dict[str, Any]]:
        with open_board(Layout.at(self.repo)) as board:
            return [e.to_dict() for e in board.events.read() if e.event == name]

    def tasks(self) -> list[Any]:
        with open_board(Layout.at(self.repo)) as board:
            return board.list()

    def head(self, n: int) -> str:
        return self.gh.head_of(self.gh.pulls[n].head) or ""

    def loop(self, n: int) -> tuple[list[float], list[float]]:
        """The whole loop for ``n`` issues; (CI -> pending, CI -> claimed) per task."""
        for i in range(n):
            self.person.rest.issues.create("acme", "app", title=f"Task {i}", body=f"work {i}",
                                           labels=["orchestrator"])
        wait(lambda: len(self.gh.pulls) == n, 120, "the pull requests")
        wait(lambda: all(t.forge and t.forge.pushed for t in self.tasks()), 60, "pushed")
        back, restart = [], []
        for number in sorted(self.gh.pulls):
            first = self.head(number)
            claims = len(self.events("task_claimed"))
            retried = len(self.events("task_retried"))
            t0 = time.time()
            self.person.rest.checks.create("acme", "app", name="ci", head_sha=first,
                                           status="completed", conclusion="failure",
                                           output={"title": "ci", "summary": "red"})
            wait(lambda c=claims: len(self.events("task_claimed")) > c, 60, "the restart")
            back.append(_ts(self.events("task_retried")[retried]) - t0)
            restart.append(_ts(self.events("task_claimed")[claims]) - t0)
            wait(lambda nb=number, f=first: self.head(nb) != f, 60, "the fix pushed")
            self.person.rest.checks.create("acme", "app", name="ci", head_sha=self.head(number),
                                           status="completed", conclusion="success")
        for number in sorted(self.gh.pulls):
            second = self.head(number)
            self.person.rest.pulls.create_review("acme", "app", number,
                                                 event="REQUEST_CHANGES", body="more",
                                                 comments=[{"path": "README.md", "line": 1,
                                                            "body": "why?"}])
            wait(lambda nb=number, s=second: self.head(nb) != s, 60, "the review answered")
        wait(lambda: all(t.status is Status.REVIEW and t.forge and t.forge.pushed ==
                         self.head(t.forge.pr) for t in self.tasks()), 60, "all back in review")
        for number in sorted(self.gh.pulls):
            self.person.rest.pulls.merge("acme", "app", number)
        wait(lambda: all(t.status is Status.MERGED for t in self.tasks()), 60, "all merged")
        return back, restart

    def bot(self, since: int = 0) -> tuple[int, int]:
        """Requests of orchestrator's token: (all, counted) since ``since``."""
        mine = [r for r in self.gh.served(since) if r[3] == "orch-bot"]
        return len(mine), sum(1 for r in mine if r[2] != 304)


def _ts(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["ts"]).replace("Z", "+00:00")).timestamp()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=3)
    ap.add_argument("--quiet", type=float, default=12.0)
    ap.add_argument("--detail", action="store_true", help="counted requests by route")
    args = ap.parse_args()
    n = args.tasks
    with tempfile.TemporaryDirectory(prefix="bench-forge-") as tmp:
        run = Run(Path(tmp) / "poll", webhook=False)
        try:
            run.start()
            back, restart = run.loop(n)
            time.sleep(8)  # the merges' last effects (issues closed by "Closes #N") seen
            total, counted = run.bot()
            if args.detail:
                routes: dict[str, int] = {}
                for m, path, status, user in run.gh.served():
                    if user == "orch-bot" and status != 304:
                        key = f"{m} {path.replace('/repos/acme/app', '')}"
                        routes[key] = routes.get(key, 0) + 1
                for key, count in sorted(routes.items(), key=lambda kv: -kv[1]):
                    print(f"  {count:4d} {key}")
            mark_at = len(run.gh.served())
            time.sleep(args.quiet)
            q_total, q_counted = run.bot(mark_at)
        finally:
            run.stop()
        hook = Run(Path(tmp) / "hook", webhook=True)
        try:
            hook.start()
            h_back, h_restart = hook.loop(n)
        finally:
            hook.stop()
    per = counted / n
    print(f"forge loop, {n} tasks (issue -> PR -> CI red -> fixed -> changes requested -> fixed"
          " -> merged), 2 teammates, command agent")
    print(f"requests per task: {per:.1f} counted (goal <= {GOAL_REQUESTS}) "
          f"{mark(per <= GOAL_REQUESTS)}; {total / n:.1f} sent, "
          f"{(total - counted) / n:.1f} of them 304")
    print(f"quiet {args.quiet:.0f} s after the loop: {q_counted} counted requests (goal 0) "
          f"{mark(q_counted == 0)}; {q_total} sent, all 304")
    for label, b, r, goal in (("polling, poll_seconds 4", back, restart, GOAL_POLL),
                              ("webhook", h_back, h_restart, GOAL_HOOK)):
        print(f"CI result -> agent restart ({label}): median {statistics.median(r):.2f} s, "
              f"max {max(r):.2f} s (goal <= {goal:g} s) {mark(max(r) <= goal)}; "
              f"-> task back in pending: median {statistics.median(b):.2f} s, "
              f"max {max(b):.2f} s")
    print(json.dumps({"requests_per_task": per, "sent_per_task": total / n,
                      "quiet_counted": q_counted, "restart_poll": restart,
                      "restart_webhook": h_restart}))


if __name__ == "__main__":
    main()
