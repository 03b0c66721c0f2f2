"""The team runtime: the lead supervisor, teammate processes, mailboxes."""
