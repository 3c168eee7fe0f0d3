"""The ask-user MCP server that Claude Code starts once per run (``python -m mcp_server``).

It offers one tool, ``ask_user``, which relays a question to PromptManager and waits for the
browser user's answer. Nothing is imported here so that start-up stays cheap.
"""
