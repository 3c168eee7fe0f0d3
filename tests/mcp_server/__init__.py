"""Tests for the ask-user MCP server (mcp_server/)."""
