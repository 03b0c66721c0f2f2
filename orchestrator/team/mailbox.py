"""Mailbox names and reading helpers (the mailboxes themselves are part of the control
plane: see `orchestrator.controlplane.Mailboxes`, reached through ``board.mailboxes``)."""

from __future__ import annotations

from orchestrator.board.mailboxes import LEAD, NAME_RE, Mailbox, check_name
from orchestrator.controlplane import Mailboxes, Message

__all__ = ["LEAD", "NAME_RE", "Mailbox", "check_name", "read_new"]
# `Mailbox` (the file board's, by path) stays importable from here for code written
# before the control-plane interface; new code uses ``board.mailboxes``.


def read_new(mailboxes: Mailboxes, name: str, reader: str | None = None) -> list[Message]:
    """The messages ``reader`` (default: the owner) has not seen, acknowledged at once."""
    msgs = mailboxes.unread(name, reader)
    if msgs:
        mailboxes.ack(name, msgs[-1].id, reader)
    return msgs
