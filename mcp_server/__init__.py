"""The ask-user MCP server that Claude Code starts once per run (``python -m mcp_server``).

It offers two tools: ``ask_user``, which relays a question to PromptManager and waits for the
browser user's answer, and ``approve``, the permission prompt tool through which the user decides
each tool call that needs permission. Nothing is imported here so that start-up stays cheap.
"""
