"""The agent runtime: the master loop, its tools, the permission gate and the sandbox."""
