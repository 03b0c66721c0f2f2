"""Kept branches as git sees them: where each starts and what it changes (`changes`),
which of its files are control files (`control`), and what review shows of it, asked of
git once per pair of commits (`facts`) and kept in the repository's git dir (`cache`).

Below both review and the team: ``review`` reads the answers, and a teammate fills them
in as its task reaches review (`facts.remember`). Nothing here reads the board.
"""
