"""Fixtures of the conformance suite: every test runs once per board implementation."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orchestrator.controlplane import ControlPlane
from tests.conformance.boards import IMPLEMENTATIONS, Spec, make_spec, open_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=IMPLEMENTATIONS)
def spec(request: pytest.FixtureRequest, tmp_path: Path, repo: Path) -> Spec:
    """A fresh board (max 2 attempts, fast rescans) of each implementation."""
    url = request.getfixturevalue("pg_board_url") if request.param == "postgresql" else None
    return make_spec(str(request.param), tmp_path, repo, url=url, max_attempts=2,
                     rescan_seconds=0.2)


@pytest.fixture
def opener(spec: Spec) -> Iterator[Callable[..., ControlPlane]]:
    """Opens more handles on the same board (another process would), closed at the end."""
    opened: list[ControlPlane] = []

    def open_(actor: str = "test") -> ControlPlane:
        plane = open_spec(spec, actor)
        opened.append(plane)
        return plane

    yield open_
    for p in opened:
        p.close()


@pytest.fixture
def plane(opener: Callable[..., ControlPlane]) -> ControlPlane:
    return opener("cli")


def start_worker(spec: Spec, job: str, name: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.conformance.worker", json.dumps(spec), job, name, *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> dict[str, object]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result
