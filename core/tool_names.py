"""The names Claude Code knows our tools by, and its own question tool's: written once.

The bundled MCP server registers as ``ask-user`` with the tools ``ask_user`` (Claude asks
a question) and ``approve`` (the CLI's ``--permission-prompt-tool``); Claude Code calls an
MCP tool ``mcp__<server>__<tool>``.
"""

from __future__ import annotations

MCP_SERVER_NAME = "ask-user"
ASK_TOOL = "ask_user"
APPROVE_TOOL = "approve"
MCP_ASK_USER = f"mcp__{MCP_SERVER_NAME}__{ASK_TOOL}"
MCP_APPROVE = f"mcp__{MCP_SERVER_NAME}__{APPROVE_TOOL}"
# Claude Code's built-in tools that change files (what plan mode refuses, what an Edit rule covers).
FILE_EDIT_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
# Claude Code's built-in question tool (1–4 questions); -p mode offers it only with a prompt tool.
ASK_USER_QUESTION = "AskUserQuestion"
