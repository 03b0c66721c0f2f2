"""A worker process of the conformance suite: opens the board of a `Spec` and does one
job, printing one JSON line of results.

    python -m tests.conformance.worker SPEC_JSON JOB NAME [ARGS…]

Jobs: ``claim-all`` (claim and complete until nothing is ready), ``events N``
(append N events, each with a fresh task every 5th: add + claim), ``append-forever``
(append events until killed), ``ask ID`` (a permission request, then wait for the
answer).
"""

from __future__ import annotations

import json
import sys

from orchestrator.events import LandNote
from tests.conformance.boards import open_spec


def main(argv: list[str]) -> int:
    spec, job, name, *args = argv
    plane = open_spec(json.loads(spec), actor=name)
    try:
        if job == "claim-all":
            won = []
            while True:
                task = plane.claim(name)
                if task is None:
                    if not plane.ready():
                        break
                    continue
                assert task.lease is not None
                plane.complete(task.id, task.lease.token)
                won.append(task.id)
            print(json.dumps({"won": won}))
        elif job == "events":
            seqs = []
            for i in range(int(args[0])):
                if i % 5 == 0:
                    task = plane.add(f"{name} {i}", actor=name)
                    seqs.append(plane.events.last_seq())
                    plane.claim(name, task_id=task.id)
                else:
                    seqs.append(plane.events.emit(LandNote(note=str(i)), None).seq)
            print(json.dumps({"seqs": seqs}))
        elif job == "append-forever":
            print(json.dumps({"started": True}), flush=True)
            i = 0
            while True:
                plane.events.emit(LandNote(note=f"{i} {'x' * 2000}"), "task_001")
                i += 1
        elif job == "ask":
            plane.requests.ask("permission", request_id=args[0], sender=name,
                               task=None, body="Bash(make)", tool="Bash")
            print(json.dumps({"asked": True}), flush=True)
            got = plane.requests.wait(args[0], timeout=60)
            print(json.dumps({"approved": None if got is None else got.approved,
                              "message": None if got is None else got.message}))
        else:
            raise SystemExit(f"unknown job {job!r}")
    finally:
        plane.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
