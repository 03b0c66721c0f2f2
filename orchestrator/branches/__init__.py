"""Kept branches as git sees them: where each starts and what it changes (`changes`),
which of its files are control files (`control`), and what review shows of it, asked of
git once per pair of commits (`facts`) and kept in the repository's git dir (`cache`).
Nothing here reads the board.
"""
