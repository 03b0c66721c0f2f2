"""What isolation costs (issues 16 and 29); prints each figure beside its goal.

    .venv/bin/python scripts/bench/isolation.py [--runs N]

Issue 29, for each runner (bubblewrap, with the host's network or one of its own through
slirp4netns, and podman when it is installed):

- per sandboxed command: `true` through `Sandbox.session` against the same command on
  the host (today's checks, setup and CLI backends ran there) — goal ≤ 50 ms;
- per task, against a 30-second task (goal ≤ 10 %, 3 s): the sandbox start of the
  backend's run and of its checks (two sandboxed commands), the object import of one
  commit the run made (a committing command minus a plain one: the pack made in the
  sandbox, `index-pack --strict` into the quarantine, the move, `update-ref`), and the
  credential proxy (start, one proxied request minus the same request made directly,
  stop) against the loopback model stand-in;

and issue 16's figures:

- `protect_process` (non-dumpable + secrets overwritten in the environment block),
  once per process, in a fresh process;
- the secret scan of `commit_leftovers` (one `git diff --cached --name-only` and a
  read of each changed file), per task commit;
- parsing a bash command for the permission gate (tree-sitter-bash), per call, and
  the one-time import of the parser.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.sandbox import Sandbox, _probe, safe_env

ROOT = Path(__file__).resolve().parents[2]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def line(what: str, value: float, goal: float) -> None:
    mark = "✓" if value <= goal else "✗"
    print(f"{mark} {what}: {value:.1f} ms (goal ≤ {goal:g} ms)")


def host_ms(cwd: Path, env: dict[str, str], runs: int) -> float:
    return median_ms(lambda: subprocess.run(["/bin/sh", "-c", "true"], cwd=cwd, env=env,
                                            check=True), runs)


def sandboxed_ms(box: Sandbox, cwd: Path, env: dict[str, str], command: str,
                 runs: int) -> float:
    def once() -> None:
        with box.session(["/bin/sh", "-c", command], cwd, env) as run:
            assert run.popen(cwd=cwd, env=env).wait() == 0
        assert run.note is None, run.note
    return median_ms(once, runs)


def post(url: str, key: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", "/v1/messages", body=json.dumps(
        {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}),
        headers={"x-api-key": key, "content-type": "application/json"})
    assert conn.getresponse().read()
    conn.close()


def proxy_ms(runs: int) -> float:
    """Start a proxy, send one request through it, stop it; minus the direct request."""
    from orchestrator.sandbox.credproxy import CredentialProxy
    from tests.loopback import LoopbackAPI

    with LoopbackAPI() as api:
        def direct() -> None:
            api.reply("x")
            post(api.url, "sk-ant-bench-0123456789")

        def proxied() -> None:
            api.reply("x")
            proxy = CredentialProxy(api.url, "sk-ant-bench-0123456789").start()
            try:
                post(proxy.url, proxy.token)
            finally:
                proxy.close()
        return median_ms(proxied, runs) - median_ms(direct, runs)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=15)
    args = p.parse_args()
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "README.md").write_text("x\n")
        git(repo, "add", "-A")
        git(repo, "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-qm", "init")
        wt = repo / ".worktrees" / "task_001"
        git(repo, "worktree", "add", "-q", "-b", "task/001-x", str(wt))
        if _probe()[1] is None:
            box = Sandbox.detect("on")
            plain_env = safe_env(env)
            host = host_ms(wt, plain_env, args.runs)
            boxed = sandboxed_ms(box, wt, plain_env, "true", args.runs)
            print(f"  bwrap: `true` on the host {host:.1f} ms, in the sandbox {boxed:.1f} ms")
            line("bwrap: per sandboxed command (sandbox - host)", boxed - host, 50)
            if shutil.which("slirp4netns"):
                own = replace(box, network=True, slirp=shutil.which("slirp4netns"))
                owned = sandboxed_ms(own, wt, plain_env, "true", args.runs)
                line("bwrap + a network of its own (slirp4netns), per command (- host)",
                     owned - host, 50)
            committing = sandboxed_ms(
                box, wt, plain_env, "git commit -q --allow-empty -m x", args.runs)
            imported = committing - boxed
            line("bwrap: object import of a run's commit, per task", imported, 250)
            proxy = proxy_ms(args.runs)
            line("credential proxy, per task (start + one request + stop - direct)", proxy, 50)
            per_task = 2 * (boxed - host) + imported + proxy
            line("bwrap: per task (2 sandbox starts + import + proxy) vs 10 % of a 30 s task",
                 per_task, 3000)
            print(f"  = {per_task / 300:.2f} % of a 30-second task")
        else:
            print(f"- bubblewrap unusable here ({_probe()[1]}): sandbox figures skipped")
        if shutil.which("podman"):
            box = Sandbox.detect("on", runner="podman")
            plain_env = safe_env(env)
            host = host_ms(wt, plain_env, max(args.runs // 3, 3))
            boxed = sandboxed_ms(box, wt, plain_env, "true", max(args.runs // 3, 3))
            committing = sandboxed_ms(box, wt, plain_env, "git commit -q --allow-empty -m x",
                                      max(args.runs // 3, 3))
            print(f"  podman: `true` in a container {boxed:.1f} ms (no goal: a full container "
                  "per command is the heavy option)")
            per_task = 2 * (boxed - host) + (committing - boxed)
            line("podman: per task (2 container starts + import) vs 10 % of a 30 s task",
                 per_task, 3000)
        else:
            print("- podman is not installed: no container runner figures")
        print("- docker: not measured (not installed here)")
        probe = ("import time; t=time.perf_counter(); from orchestrator.secrets import "
                 "protect_process; protect_process(); print((time.perf_counter()-t)*1000)")
        out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True,
                             capture_output=True, text=True,
                             env={**env, "ANTHROPIC_API_KEY": "sk-ant-bench-0123456789"})
        line("protect_process, once per process (import included)", float(out.stdout), 50)
        from orchestrator.model import Task
        from orchestrator.team.commit import commit_leftovers

        os.environ["ANTHROPIC_API_KEY"] = "sk-ant-bench-0123456789"
        base = git(wt, "rev-parse", "HEAD")

        def task_commit() -> None:
            for i in range(20):
                (wt / f"f{i}.txt").write_text(f"{time.perf_counter()}\n")
            commit_leftovers(wt, Task(id="task_001", subject="bench"), "alice", base)

        with_scan = median_ms(task_commit, args.runs)
        del os.environ["ANTHROPIC_API_KEY"]
        without = median_ms(task_commit, args.runs)
        line("secret scan of a task commit (20 files)", with_scan - without, 25)
        t = time.perf_counter()
        from orchestrator.agent.shell_parse import analyze

        analyze("true")
        line("bash parser import, once per process", (time.perf_counter() - t) * 1000, 100)
        cmd = "cd src && FOO=1 timeout 60 npm test -- --watch=false 2>&1 | grep -v warn | " \
              "xargs -0 echo; bash -c 'make -j4 && ./run.sh' || echo $(date) > out.txt"
        line("parse of a 150-character command line, per call",
             median_ms(lambda: analyze(cmd), 200), 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
