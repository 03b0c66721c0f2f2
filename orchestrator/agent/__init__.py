"""The agent runtime: the master loop, its tools and the permission gate (the sandbox it
runs commands in is `orchestrator.sandbox`)."""
