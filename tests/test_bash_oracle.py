"""Real bash is the oracle: a line the gate allows never runs a program a deny rule names.

A stand-in ``pwn`` on PATH, and an ``ls`` that only a hijacked PATH finds, leave a mark
when they run. Every hostile line below, alone and inside each wrapper, that the gate
allows — in bypass mode with ``Bash(pwn:*)`` denied, or with allow rules for harmless
programs — runs in bash as the bash tool runs it (stdin closed) and must leave none."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from orchestrator.agent.permissions import PermissionGate
from orchestrator.agent.tools import default_tools

BASH = next(t for t in default_tools() if t.name == "bash")
HARMLESS = ["ls", "echo", "cat", "true", "printf", "read", "test", "mapfile", "wait", "getopts",
            "declare", "export", "set", ":", "find", "xargs", "env", "nice", "timeout", "sh",
            "bash", "command", "exec", "watch", "flock", "taskset", "script", "f"]
HOSTILE = [
    "env -vS'pwn x'", "watch 'pwn x'", "echo x | fakeroot", "echo pwn | xargs env",
    "echo pwn | xargs -I{} sh -c '{}'", "taskset -c 0 pwn", "flock -u {lock} pwn",
    "coproc { pwn; }", "true && ! for x in 1; do pwn; done", "time ! pwn",
    "cat <<EOF\n`pwn`\nEOF", "cat <<-EOF\n\t$(pwn)\n\tEOF", "echo ${x:-`pwn`}",
    "nice [[ x == $(pwn) ]]", "printf -v'a[$(pwn)]' %s y", "wait -p'a[$(pwn)]' -n",
    "hash -rp {bin}/pwn ls; ls", "printf -v PATH %s {evil}; ls", "read PATH <<< {evil}; ls",
    "for PATH in {evil}; do ls; done", "echo {evil} | mapfile -t PATH; ls",
    "export PATH={evil}; ls", "PATH={evil} ls", "f() { pwn; }; f", "$(echo pwn)", "p\\wn",
    "'p'wn", "eval pwn", "echo pwn | sh", "bash -c \"$(echo pwn)\"", "cat <(pwn)",
    "find . -maxdepth 0 -exec pwn \\;", "trap pwn EXIT", "env -i {bin}/pwn", "command pwn",
    "sh -c 'exec \"$0\"' pwn", "set -- pwn; \"$@\"", "x=(pwn); ${x[0]}", "alias p=pwn; p",
    "cat <<EOF; pwn\nx\nEOF | s=1; \"$s\"", "declare -n r=x; r='a[$(pwn)]'",
    "(( a[$(pwn)] ))", "echo ${!v} $((v))", "echo `echo \\`pwn\\``",
    "strace -o '|pwn' true", "fakeroot --faked pwn true", "xargs --max-lines pwn",
    "dbus-run-session --dbus-daemon={bin}/pwn true", "nsenter --wdns pwn true",
]
WRAPPERS = ["\0", "bash -c \1", "eval \1", "env \0", "xargs \0", "timeout 5 \0", "(\0)",
            "echo $(\0)", "nice -n 1 \0", "f() { \0; }; f", "script -qc \1 /dev/null"]
"""\0 stands for the line, \1 for the line quoted."""


def _lines(tmp: Path) -> list[str]:
    hostile = HOSTILE
    for name in ("bin", "evil", "lock"):
        hostile = [h.replace("{" + name + "}", str(tmp / name)) for h in hostile]
    return [w.replace("\1", "'" + h.replace("'", "'\\''") + "'").replace("\0", h)
            for w in WRAPPERS for h in hostile]


@pytest.fixture
def oracle(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    mark = tmp_path / "MARK"
    for where, name in (("bin", "pwn"), ("evil", "ls")):
        (tmp_path / where).mkdir()
        program = tmp_path / where / name
        program.write_text(f"#!/bin/sh\n/usr/bin/touch {mark}\n")
        program.chmod(0o755)
    return mark, {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}


def _runs_pwn(line: str, cwd: Path, mark: Path, env: dict[str, str]) -> bool:
    proc = subprocess.Popen(["bash", "-c", line], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the line's own leftovers
        except ProcessLookupError:
            pass
        proc.wait()
    ran = mark.exists()
    mark.unlink(missing_ok=True)
    return ran


def test_no_line_the_gate_allows_runs_a_denied_program(
        tmp_path: Path, oracle: tuple[Path, dict[str, str]]) -> None:
    mark, env = oracle
    gates = [PermissionGate.from_rules(mode="bypassPermissions", root=tmp_path,
                                       deny=["Bash(pwn:*)"]),
             PermissionGate.from_rules(root=tmp_path, deny=["Bash(pwn:*)"],
                                       allow=[f"Bash({c}:*)" for c in HARMLESS])]
    lines = _lines(tmp_path)
    allowed = [line for line in lines
               if any(g.check(BASH, {"command": line}).behavior == "allow" for g in gates)]
    holes = [line for line in allowed if _runs_pwn(line, tmp_path, mark, env)]
    assert not holes, holes
    assert len(lines) > 400 and allowed  # the harmless lines still run
