from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.board.mailboxes import Mailbox
from orchestrator.errors import InvalidInput
from orchestrator.layout import Layout


def test_read_positions_are_per_reader_and_nothing_is_deleted(tmp_path: Path) -> None:
    layout = Layout.at(tmp_path).ensure()
    box = Mailbox(layout, "alice")
    first = box.send("lead", "hello")
    assert [m["body"] for m in box.read_new()] == ["hello"]
    assert box.read_new() == []
    box.send("bob", "again", kind="shutdown_request", request_id="r1")
    with box.path.open("a") as fh:
        fh.write('{"torn":')
    new = box.read_new()
    assert [(m["kind"], m["request_id"]) for m in new] == [("shutdown_request", "r1")]
    assert box.all()[0]["id"] == first["id"]
    assert [m["body"] for m in box.read_new("observer")] == ["hello", "again"]
    assert box.find(request_id="r1")[0]["from"] == "bob"


@pytest.mark.parametrize("bad", ["../x", "", "a/b", ".hidden", "x" * 65])
def test_bad_names_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InvalidInput):
        Mailbox(Layout.at(tmp_path), bad)
