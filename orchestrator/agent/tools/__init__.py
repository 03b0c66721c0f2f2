"""The built-in tools of the agent, in the order the model sees them.

    files.py        read, write, edit, multi_edit
    search.py       glob, grep, ls
    shell.py        bash
    board_tools.py  task_list, task_get, task_create, send_message
    todo.py         todo_write (the task's todo list)
    web.py          web_fetch (off unless a WebFetch(domain:…) rule allows the host)
    notebook.py     notebook_edit
    config_tool.py  config, config_set (the settings registry; set asks a person)

Added per run by the backend, as they need the run itself: ``agent``
(subagent.py, sub-agents) and ``submit_plan`` (`orchestrator.agent.plan_first`).

Each implements `orchestrator.agent.base.Tool`; tools with a path argument
declare it as ``path_arg`` (confinement and ``Read``/``Edit`` rules use it) and
file-writing ones set ``edits_files``.
"""

from __future__ import annotations

from orchestrator.agent.base import Tool
from orchestrator.agent.tools.board_tools import (
    SendMessageTool,
    TaskCreateTool,
    TaskGetTool,
    TaskListTool,
)
from orchestrator.agent.tools.config_tool import ConfigSetTool, ConfigTool
from orchestrator.agent.tools.files import EditTool, MultiEditTool, ReadTool, WriteTool
from orchestrator.agent.tools.notebook import NotebookEditTool
from orchestrator.agent.tools.search import GlobTool, GrepTool, LsTool
from orchestrator.agent.tools.shell import DEFAULT_TIMEOUT, BashTool
from orchestrator.agent.tools.todo import TodoWriteTool
from orchestrator.agent.tools.web import WebFetchTool
from orchestrator.config import AgentConfig

__all__ = ["default_tools"]


def default_tools(agent: AgentConfig | None = None, *, board: bool = True,
                  bash_timeout: float = DEFAULT_TIMEOUT) -> list[Tool]:
    """The built-in tools; ``board=False`` leaves out the board tools (no board in the run).

    ``agent`` is accepted for settings that shape the tools themselves (none yet).
    """
    tools: list[Tool] = [
        BashTool(timeout=bash_timeout), ReadTool(), WriteTool(), EditTool(), MultiEditTool(),
        GlobTool(), GrepTool(), LsTool(), NotebookEditTool(), WebFetchTool(),
    ]
    if board:
        tools += [TaskListTool(), TaskGetTool(), TaskCreateTool(), SendMessageTool(),
                  TodoWriteTool(), ConfigTool(), ConfigSetTool()]
    return tools
